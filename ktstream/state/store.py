"""The state store contract: Store -> StorePartition -> Transaction (the Quix Streams shape).

A ``Store`` holds one ``StorePartition`` per input partition this instance
owns (``open`` assigns one, ``drop_partitions`` gives them back; a partition's
data outlives both). A partition is written only through a ``Transaction``:
it holds learner states, the input offset they reflect and the changelog
checkpoint (the changelog offset after the last record of those states), and
``commit`` writes all three in one atomic step, or nothing (``StoreError``).
``Store.write`` runs one transaction per partition of a committed batch: it is
the commit protocol's store step (ktstream.engine.engine) and what a restore
(ktstream.state.changelog) and ``ktstream state import`` use.

Both backends (``SqliteStore``, ``MemoryStore``) derive from ``PartitionedStore``
below and pass the same contract suite (tests/state/test_store_contract.py).
Timing is part of the store: given ``StateMetrics``, each ``write`` observes
its duration (``ktstream_state_checkpoint_seconds``) and refreshes the size gauges.

Why SQLite (in WAL mode) and not rocksdict, as Quix Streams uses: it is in the
standard library (no extra dependency, no wheel to build), one transaction
writes many learners' states *and* the input offset they reflect atomically,
WAL lets a reader (``ktstream state inspect``) look while the engine writes,
and a file per partition moves, deletes and exports as a unit.
``synchronous=NORMAL`` survives a killed process (the WAL is in the OS's page
cache); after a power loss the changelog restores the rest.

>>> import torch
>>> from ktstream.core import LearnerState
>>> from ktstream.state.memory import MemoryStore
>>> s = MemoryStore()
>>> s.open(("ev", 0))
-1
>>> tx = s.partition(("ev", 0)).begin()
>>> tx.put(LearnerState("a", {"h": torch.ones(1, 2)}, "v1", ("ev", 0), last_offset=4))
>>> tx.commit(offset=5, changelog_offset=2)
>>> s.offset(("ev", 0)), s.load("a").last_offset, s.changelog_offset(("ev", 0))
(5, 4, 2)
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Protocol

from ktstream.core import LearnerState, TopicPartition
from ktstream.exceptions import KTStreamError
from ktstream.state import codec
from ktstream.state.metrics import StateMetrics


class StoreError(KTStreamError):
    """A write (or read) the local store could not do: a learner that cannot be encoded, a full disk,
    a damaged file. A failed transaction changed nothing in the partition it names."""


class Transaction(Protocol):
    """One atomic write of one partition: learner states, input offset and changelog checkpoint."""

    def put(self, st: LearnerState) -> None:
        """Stage ``st`` (encoded now: a state that cannot be encoded raises StoreError here)."""
        ...

    def commit(self, offset: int | None = None, changelog_offset: int | None = None) -> None:
        """Write the staged states, the input ``offset`` they reflect (None: unchanged) and the changelog
        checkpoint (None: unchanged; an older one never moves it back), all or nothing. Once only."""
        ...


class StorePartition(Protocol):
    """The durable state of one input partition, open in this instance."""

    tp: TopicPartition

    def offset(self) -> int:
        """The input offset the partition's states reflect (-1: none yet)."""
        ...

    def changelog_offset(self) -> int:
        """The changelog offset the partition's states reflect (0: none recorded: replay from the start)."""
        ...

    def load(self, learner_id: str) -> LearnerState | None: ...

    def learners(self) -> Iterator[LearnerState]:
        """Every stored learner, by id."""
        ...

    def count(self) -> int: ...

    def nbytes(self) -> int:
        """Bytes of the stored tensor blobs."""
        ...

    def begin(self) -> Transaction: ...

    def close(self) -> None:
        """Release the partition (its data stays for a later ``Store.open``)."""
        ...


class Store(Protocol):
    """The partitions this instance owns, and the reads and writes the engine and the tools make on them."""

    def open(self, tp: TopicPartition) -> int:
        """Open (or create) ``tp``'s partition; the input offset it reflects (-1: none yet)."""
        ...

    def partition(self, tp: TopicPartition) -> StorePartition:
        """An open partition (AssertionError if ``tp`` is not open)."""
        ...

    def partitions(self) -> list[TopicPartition]: ...

    def load(self, learner_id: str) -> LearnerState | None:
        """The learner's stored state, from whichever open partition holds it."""
        ...

    def write(self, states: list[LearnerState], offsets: dict[TopicPartition, int],
              changelog: dict[TopicPartition, int] | None = None) -> None:
        """One transaction per partition named in ``offsets`` or by a state's source partition."""
        ...

    def offset(self, tp: TopicPartition) -> int: ...

    def changelog_offset(self, tp: TopicPartition) -> int: ...

    def learners(self, tp: TopicPartition) -> Iterator[LearnerState]: ...

    def count(self, tp: TopicPartition) -> int: ...

    def nbytes(self, tp: TopicPartition) -> int: ...

    def drop_partitions(self, partitions: list[TopicPartition]) -> None: ...

    def close(self) -> None: ...


def encode_row(st: LearnerState, fp16: bool) -> dict[str, Any]:
    """``st``'s column values (ktstream.state.codec); any failure is one StoreError naming the learner."""
    if st.partition is None:
        raise StoreError(f"learner {st.learner_id!r} has no partition: cannot store it")
    try:
        return codec.encode(st, fp16)
    except Exception as exc:  # noqa: BLE001  (whatever a malformed state raises: one error at the boundary)
        raise StoreError(f"cannot encode learner {st.learner_id!r}: {type(exc).__name__}: {exc}") from exc


class PartitionedStore:
    """What both backends share: the open partitions by ``tp``, ``write`` as one transaction per
    partition, reads across partitions, and the metrics. A backend supplies ``_open(tp)`` (a new
    StorePartition) and ``_closed_offset(tp)`` (the offset of a partition that is not open)."""

    def __init__(self, metrics: StateMetrics | None = None):
        self.metrics = metrics
        self._open_parts: dict[TopicPartition, StorePartition] = {}

    def _open(self, tp: TopicPartition) -> StorePartition:
        raise NotImplementedError

    def _closed_offset(self, tp: TopicPartition) -> int:
        raise NotImplementedError

    def open(self, tp: TopicPartition) -> int:
        if tp not in self._open_parts:
            self._open_parts[tp] = self._open(tp)
        return self._open_parts[tp].offset()

    def partition(self, tp: TopicPartition) -> StorePartition:
        part = self._open_parts.get(tp)
        assert part is not None, f"partition {tp} is not open in this store"
        return part

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._open_parts)

    def load(self, learner_id: str) -> LearnerState | None:
        for part in self._open_parts.values():
            if (st := part.load(learner_id)) is not None:
                return st
        return None

    def write(self, states: list[LearnerState], offsets: dict[TopicPartition, int],
              changelog: dict[TopicPartition, int] | None = None) -> None:
        start = time.perf_counter()
        groups: dict[TopicPartition, list[LearnerState]] = {tp: [] for tp in offsets}
        for st in states:
            groups.setdefault(st.partition, []).append(st)
        for tp, group in groups.items():
            tx = self.partition(tp).begin()
            for st in group:
                tx.put(st)
            tx.commit(offsets.get(tp), (changelog or {}).get(tp))
        if self.metrics is not None:
            self.metrics.checkpoint_seconds.observe(time.perf_counter() - start)
            self.metrics.sizes(self)

    def offset(self, tp: TopicPartition) -> int:
        part = self._open_parts.get(tp)
        return part.offset() if part is not None else self._closed_offset(tp)

    def changelog_offset(self, tp: TopicPartition) -> int:
        self.open(tp)
        return self._open_parts[tp].changelog_offset()

    def learners(self, tp: TopicPartition) -> Iterator[LearnerState]:
        self.open(tp)
        return self._open_parts[tp].learners()

    def count(self, tp: TopicPartition) -> int:
        self.open(tp)
        return self._open_parts[tp].count()

    def nbytes(self, tp: TopicPartition) -> int:
        self.open(tp)
        return self._open_parts[tp].nbytes()

    def drop_partitions(self, partitions: list[TopicPartition]) -> None:
        """Close them (their data stays: it reflects their offsets and they may come back)."""
        for tp in partitions:
            part = self._open_parts.pop(tp, None)
            if part is not None:
                part.close()
        if self.metrics is not None:
            self.metrics.forget(partitions)
            self.metrics.sizes(self, force=True)

    def close(self) -> None:
        self.drop_partitions(list(self._open_parts))
