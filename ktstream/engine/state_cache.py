"""The hot cache of learner states: an LRU bounded in bytes, over an optional durable store.

The engine touches learner state through this one small interface:
``get`` (fills from the store on a miss), ``put``, ``evict``, ``apply`` (the
staged states of a committed micro-batch, in one step), ``bytes`` and
``len``. A store plugs in as ``StateStore`` and is written *before* the cache
in ``apply``, so the cache never holds state the store has not got: with
durable state that store is the engine's state collaborator
(ktstream.state.manager.StateManager: one SQLite database per input partition,
rebuilt from a changelog topic), whose ``write`` is the commit's store step.

Without a store, evicting a learner loses its state (it restarts from the
model's initial state) and is counted in ``evictions``; size the cache so that
it does not happen, or add the store.

>>> import torch
>>> from ktstream.core import LearnerState
>>> cache = StateCache(max_bytes=2000)
>>> for u in ["a", "b", "c"]:
...     cache.put(LearnerState(u, {"h": torch.zeros(1, 100)}, "v1"))
>>> sorted(cache.keys()), cache.evictions   # each state is ~800 bytes: "a" was evicted
(['b', 'c'], 1)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Iterator, Protocol

from ktstream.core import LearnerState, TopicPartition


class StateStore(Protocol):
    """What the cache calls on the layer under it (ktstream.state.manager.StateManager, or a bare
    ktstream.state store: SqliteStore / MemoryStore)."""

    def load(self, learner_id: str) -> LearnerState | None:
        """A learner's stored state (on a cache miss), or None."""
        ...

    def write(self, states: list[LearnerState], offsets: dict[TopicPartition, int]) -> None:
        """Write committed states and the input offsets they reflect, atomically per partition."""
        ...

    def drop_partitions(self, partitions: list[TopicPartition]) -> None:
        """Release partitions this instance no longer owns (their stored data stays)."""
        ...


class StateCache:
    def __init__(self, max_bytes: int, store: StateStore | None = None):
        assert max_bytes > 0, f"cache max_bytes must be positive, got {max_bytes}"
        self.max_bytes = max_bytes
        self.store = store
        self._entries: OrderedDict[str, LearnerState] = OrderedDict()
        self._sizes: dict[str, int] = {}  # each entry's bytes when it was put (cached states are never mutated)
        self._bytes = 0
        self.evictions = 0
        self.misses = 0

    def get(self, learner_id: str) -> LearnerState | None:
        """The learner's committed state (most recently used now), or None if it has none."""
        st = self._entries.get(learner_id)
        if st is not None:
            self._entries.move_to_end(learner_id)
            return st
        self.misses += 1
        if self.store is not None and (st := self.store.load(learner_id)) is not None:
            self.put(st)
        return st

    def peek(self, learner_id: str) -> LearnerState | None:
        """The cached state, if any, without touching the LRU order or the store."""
        return self._entries.get(learner_id)

    def replace(self, st: LearnerState) -> None:
        """Swap in a new state for a cached learner, keeping its place in the LRU order."""
        if st.learner_id not in self._entries:
            return
        self._entries[st.learner_id] = st
        size = st.nbytes
        self._bytes += size - self._sizes[st.learner_id]
        self._sizes[st.learner_id] = size

    def put(self, st: LearnerState) -> None:
        if self._entries.pop(st.learner_id, None) is not None:
            self._bytes -= self._sizes[st.learner_id]
        self._entries[st.learner_id] = st
        size = self._sizes[st.learner_id] = st.nbytes
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            victim, _ = self._entries.popitem(last=False)
            self._bytes -= self._sizes.pop(victim)
            self.evictions += 1

    def evict(self, learner_id: str) -> LearnerState | None:
        st = self._entries.pop(learner_id, None)
        if st is not None:
            self._bytes -= self._sizes.pop(learner_id)
        return st

    def evict_partitions(self, partitions: Iterable[TopicPartition]) -> int:
        """Drop every learner last seen on one of ``partitions`` (they moved to another instance)."""
        gone = set(partitions)
        victims = [lid for lid, st in self._entries.items() if st.partition in gone]
        for lid in victims:
            self.evict(lid)
        if self.store is not None:
            self.store.drop_partitions(sorted(gone))
        return len(victims)

    def apply(self, staged: Iterable[LearnerState], offsets: dict[TopicPartition, int]) -> None:
        """Make a committed micro-batch's states current: the store first, then the cache."""
        staged = list(staged)
        if self.store is not None:
            self.store.write(staged, offsets)
        for st in staged:
            self.put(st)

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, learner_id: str) -> bool:
        return learner_id in self._entries

    def keys(self) -> Iterator[str]:
        return iter(self._entries)
