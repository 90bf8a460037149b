"""The core types every layer shares: records in, outputs out, and a learner's state in between.

A source hands the engine ``Record`` objects and a sink takes ``Output`` objects
(the engine's ports, ktstream.engine.records); ``step_key`` groups a learner's
interactions into steps (the training data and the serving path use the same
one); ``LearnerState`` is what the engine, the serving layer and the state
stores keep per learner. This module imports nothing from ktstream, so any
layer may import it (pyproject.toml's import-linter contracts check that).

Offsets follow Kafka's convention: a committed offset is the *next* offset to
read, so committing ``{("events", 0): 42}`` means records 0..41 are done.

Per-learner state: besides the model's state (leading dim 1) a learner keeps

- the *open step*: its key (step id or event time) and, once a member of the
  step has been applied, the model state at the step's start, so a later
  member of the same step (even one arriving in a later micro-batch) is
  predicted from the step-start state (invariant 1);
- the last applied event (event time, id, source offset): lateness is judged
  against the latest applied event time, duplicates by source offset;
- counters and the model version that built the state (a hot swap rebuilds it);
- the *raw window*: its most recent interactions as plain tuples in
  ``WindowRecord``'s field order (oldest first), from which a hot swap rebuilds
  the state with new weights (ktstream.engine.swap; ktstream.serving.rebuild).
  Plain tuples, not named ones: CPython's garbage collector stops tracking an
  exact tuple of ids and numbers once it has looked at it and at the tuples it
  holds, a tuple subclass never (each one is scanned until it is frozen, and
  every full collection walks them all), and a cache of long histories holds
  millions of them. It is bounded in
  records and in bytes (``window_nbytes``: the tuples plus every id string,
  counted as if no other learner shared it), so a learner with long ids cannot
  grow its cached state or its changelog record without bound.

A ``LearnerState`` held by the cache is never mutated: the engine works on a
``copy()`` and the copy replaces the cached one only after the commit.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, NamedTuple

TopicPartition = tuple[str, int]


class _RecordFields(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    tp: TopicPartition = ("", -1)  # (topic, partition), made once by Record


class Record(_RecordFields):
    """One input record as the broker delivered it (value is the raw bytes).

    A named tuple, made once per record on the hot path: a third of a frozen dataclass's
    construction cost, and as immutable; pickled or copied, it is made again from its fields.

    >>> import copy, pickle
    >>> r = Record("events", 3, 7, b"u1", b"{}")
    >>> r.tp, pickle.loads(pickle.dumps(r)) == r, copy.copy(r).tp
    (('events', 3), True, ('events', 3))
    """

    __slots__ = ()

    def __new__(cls, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                timestamp_ms: int | None = None, headers: tuple[tuple[str, bytes], ...] = ()) -> "Record":
        return tuple.__new__(cls, (topic, partition, offset, key, value, timestamp_ms, headers, (topic, partition)))

    def __getnewargs__(self) -> tuple:
        return tuple(self)[:7]  # tp is derived (pickle, copy)


class Output(NamedTuple):
    """One message for the sink: topic, key (learner id, bytes) and value; ``partition`` None lets the
    sink's partitioner choose (by key), a number sends it there; ``headers`` go with it (a changelog
    record names its source in both, ktstream.state.changelog). A named tuple: one is made per event."""

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


#: Rough cost of the Python objects around the tensors (dataclass, cache entries); the id strings
#: are counted with ``str_nbytes``.
OVERHEAD_BYTES = 400
#: One raw-window record besides its strings: the tuple, its concept tuple (8 bytes more per
#: concept), the time and seq ints (tracemalloc: 166-220 bytes + 8 per concept).
WINDOW_RECORD_BYTES = 176


class WindowRecord(NamedTuple):
    """One applied event as the raw window keeps it (what a replay through a model needs): the field
    names of the plain tuples a window holds (``WindowRecord._make(r)`` reads one by name; the
    ``W_*`` indexes read a field where it runs once per event)."""

    item_id: str
    concept_ids: tuple[str, ...]
    response: int | None  # None: a prediction request
    event_time_ms: int | None
    step_id: str | None
    seq: int  # the learner's event count: ties in event time keep their order
    event_id: str | None = None  # a repeat of it at a new offset is a duplicate (ktstream.engine.batcher)


W_ITEM, W_CONCEPTS, W_RESPONSE, W_TIME, W_STEP, W_SEQ, W_EVENT_ID = range(7)  # a window record's fields


def step_key(step_id: str | None, event_time_ms: int | None) -> tuple[str, Any] | None:
    """The key that groups a learner's interactions into a step (as ktstream.data.histories does).

    >>> step_key("b7", 5), step_key(None, 5), step_key(None, None)
    (('s', 'b7'), ('t', 5), None)
    """
    if step_id is not None:
        return ("s", step_id)
    return None if event_time_ms is None else ("t", event_time_ms)


def _record_key(rec: tuple) -> tuple[str, Any] | None:
    return step_key(rec[W_STEP], rec[W_TIME])


def str_nbytes(s: str | None) -> int:
    """Bytes a string object takes (allocations are 16-byte aligned); 0 for None.

    >>> str_nbytes("q1"), str_nbytes("x" * 250), str_nbytes(None)
    (64, 304, 0)
    """
    return 0 if s is None else -(-sys.getsizeof(s) // 16) * 16


def record_nbytes(rec: tuple) -> int:
    """Bytes one raw-window record holds, its id strings included as if it were their only holder
    (interned ids shared by many learners are counted once per record: an upper bound). ``str_nbytes``
    of each string, inline: this runs once per applied event."""
    item, concepts, _, _, step_id, _, event_id = rec
    n = WINDOW_RECORD_BYTES + 8 * len(concepts) - (-sys.getsizeof(item) // 16) * 16
    for s in concepts:
        n -= (-sys.getsizeof(s) // 16) * 16
    if step_id is not None:
        n -= (-sys.getsizeof(step_id) // 16) * 16
    if event_id is not None:
        n -= (-sys.getsizeof(event_id) // 16) * 16
    return n


def window_nbytes(window: tuple[tuple, ...]) -> int:
    return sum(map(record_nbytes, window))


def memory_nbytes(*states: Any) -> int:
    """Bytes of memory the states hold, each piece once. A state that is not a dict lives in memory
    the serving layer holds for many learners (ktstream.serving.arena: a row) and tells its ``nbytes``
    (the whole row, an attention cache's spare slots included; often shared with the state at the
    step's start)."""
    held = {}
    for state in states:
        if state is None or isinstance(state, dict):
            held.update((id(t), t.nbytes) for t in (state or {}).values())
        else:
            held[id(state.row)] = state.nbytes
    return sum(held.values())


@dataclass(slots=True)
class LearnerState:
    learner_id: str
    state: Any  # the model's state (ktstream.models.base.State) or a serving-layer row
    model_version: str
    partition: TopicPartition | None = None
    step_key: tuple[str, Any] | None = None
    step_state: Any = None  # model state at the open step's start, once it differs
    last_event_time_ms: int | None = None
    last_event_id: str | None = None
    last_offset: int = -1
    events: int = 0
    responses: int = 0
    late: int = 0
    window: tuple[tuple, ...] = ()  # plain tuples in WindowRecord's field order
    window_bytes: int = -1  # window_nbytes(window), kept up to date by remember (-1: computed at construction)

    def __post_init__(self) -> None:
        if self.window_bytes < 0:
            self.window_bytes = window_nbytes(self.window)

    def copy(self) -> "LearnerState":
        """A working copy; tensors are shared (the model's update returns new ones)."""
        return LearnerState(self.learner_id, self.state, self.model_version, self.partition, self.step_key,
                            self.step_state, self.last_event_time_ms, self.last_event_id, self.last_offset,
                            self.events, self.responses, self.late, self.window, self.window_bytes)

    @property
    def nbytes(self) -> int:
        """Bytes this state holds: tensors, the raw window and every string, each id as if unshared."""
        state, key = self.state, self.step_key
        # one serving-layer row (most learners between steps) is memory_nbytes' case, without its dict
        held = memory_nbytes(state, self.step_state) if self.step_state is not None or state is None \
            or isinstance(state, dict) else state.nbytes
        step_id = key[1] if key is not None and isinstance(key[1], str) else None
        return (held + OVERHEAD_BYTES + str_nbytes(self.learner_id) + str_nbytes(self.last_event_id)
                + str_nbytes(step_id) + self.window_bytes)

    def remember(self, record: tuple, keep: int, max_bytes: int | None = None) -> None:
        """Append an applied event to the raw window (0: keep none).

        The window keeps the open step's records and at least the last ``keep`` interactions with a
        response before it, with the prediction requests among them (they shape steps, not the
        state): enough to rebuild both the state and the state at the open step's start of a model
        that sees the last ``keep`` interactions. It is trimmed once it is ``keep // 8`` (at least
        8) records over, so trimming costs O(1) per event on average; a single open step longer
        than ``2 * keep`` records is cut too (bounded memory beats exactness there).

        With ``max_bytes`` the window also never holds more than that many bytes (``window_nbytes``):
        the oldest records go first, the open step's too if need be, down to none when the newest
        record alone is larger.
        """
        if keep <= 0:
            return
        w = self.window + (record,)
        size = self.window_bytes + record_nbytes(record)
        if len(w) > keep + max(8, keep // 8):
            key = _record_key(record)
            step = len(w) - 1
            while key is not None and step > 0 and _record_key(w[step - 1]) == key:
                step -= 1
            excess = sum(r[W_RESPONSE] is not None for r in w[:step]) - keep
            start = 0
            while start < step and (excess > 0 or w[start][W_RESPONSE] is None):
                excess -= w[start][W_RESPONSE] is not None
                start += 1
            cut = max(start, len(w) - 2 * keep)
            size -= window_nbytes(w[:cut])
            w = w[cut:]
        if max_bytes is not None and size > max_bytes:
            cut = 0
            while cut < len(w) and size > max_bytes:
                size -= record_nbytes(w[cut])
                cut += 1
            w = w[cut:]
        self.window, self.window_bytes = w, size

    def query_state(self, key: tuple[str, Any] | None) -> Any:
        """State to predict an interaction with step key ``key`` from; opens a new step if needed."""
        if key is None or key != self.step_key:
            self.step_key, self.step_state = key, None
        return self.step_state if self.step_state is not None else self.state

    def applied(self, new_state: Any, partition: TopicPartition, offset: int,
                event_id: str, event_time_ms: int | None, late: bool) -> None:
        """Record an applied event; ``new_state`` is None for a prediction-only event."""
        if new_state is not None:
            if self.step_key is not None and self.step_state is None:
                self.step_state = self.state  # later members of this step still see its start
            self.state = new_state
            self.responses += 1
        self.partition, self.last_offset, self.last_event_id = partition, offset, event_id
        if event_time_ms is not None and (self.last_event_time_ms is None or event_time_ms > self.last_event_time_ms):
            self.last_event_time_ms = event_time_ms
        self.events += 1
        self.late += int(late)
