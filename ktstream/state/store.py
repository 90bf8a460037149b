"""Durable learner state, one database per input partition, behind one small interface.

Why SQLite (in WAL mode) and not rocksdict, as Quix Streams uses: it is in the
standard library (no extra dependency, no wheel to build), one transaction
writes many learners' states *and* the input offset they reflect atomically
(the commit protocol's step 4), WAL lets a reader (``ktstream state inspect``)
look while the engine writes, and a file per partition moves, deletes and
exports as a unit. ``synchronous=NORMAL`` survives a killed process (the WAL
is in the OS's page cache); after a power loss the changelog restores the rest.

Both backends (``SqliteStore``, ``MemoryStore``) store the same encoded rows
(ktstream.state.codec) and pass the same contract tests (tests/state/).

>>> import torch
>>> from ktstream.engine.learner import LearnerState
>>> s = MemoryStore()
>>> s.open(("ev", 0))
-1
>>> s.write([LearnerState("a", {"h": torch.ones(1, 2)}, "v1", ("ev", 0), last_offset=4)], {("ev", 0): 5})
>>> s.offset(("ev", 0)), s.load("a").last_offset, s.changelog_offset(("ev", 0))
(5, 4, 0)
"""

from __future__ import annotations

from typing import Any, Iterator

from ktstream.engine.learner import LearnerState
from ktstream.engine.records import TopicPartition
from ktstream.exceptions import KTStreamError
from ktstream.state import codec


class StoreError(KTStreamError):
    """A write (or read) the local store could not do: a learner that cannot be encoded, a full disk,
    a damaged file. A failed ``write`` changed nothing in the partition it names."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS learners (learner_id TEXT PRIMARY KEY, blob BLOB NOT NULL, model_version TEXT,
  topic TEXT, part INTEGER, step_key TEXT, last_event_time_ms INTEGER, last_event_id TEXT,
  last_offset INTEGER, events INTEGER, responses INTEGER, late INTEGER);
CREATE TABLE IF NOT EXISTS offsets (topic TEXT, part INTEGER, next_offset INTEGER, PRIMARY KEY (topic, part));
CREATE TABLE IF NOT EXISTS changelog (topic TEXT, part INTEGER, next_offset INTEGER, PRIMARY KEY (topic, part));
"""
_INSERT = (f"INSERT OR REPLACE INTO learners ({', '.join(codec.COLUMNS)}) "
           f"VALUES ({', '.join('?' * len(codec.COLUMNS))})")


def _by_partition(states: list[LearnerState], offsets: dict[TopicPartition, int]):
    groups: dict[TopicPartition, list[LearnerState]] = {tp: [] for tp in offsets}
    for st in states:
        assert st.partition is not None, f"learner {st.learner_id!r} has no partition: cannot store it"
        groups.setdefault(st.partition, []).append(st)
    return groups


def _encode(st: LearnerState, fp16: bool) -> dict[str, Any]:
    try:
        return codec.encode(st, fp16)
    except Exception as exc:  # noqa: BLE001  (whatever a malformed state raises: one error at the boundary)
        raise StoreError(f"cannot encode learner {st.learner_id!r}: {type(exc).__name__}: {exc}") from exc


class MemoryStore:
    """The same contract in memory (tests, benchmarks): a partition's data survives ``close``."""

    def __init__(self, fp16: bool = False):
        self.fp16 = fp16
        self._rows: dict[TopicPartition, dict[str, dict[str, Any]]] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._changelog: dict[TopicPartition, int] = {}
        self._open: set[TopicPartition] = set()

    def open(self, tp: TopicPartition) -> int:
        """Open a partition's database; the input offset it reflects (-1: none yet)."""
        self._open.add(tp)
        self._rows.setdefault(tp, {})
        return self._offsets.get(tp, -1)

    def offset(self, tp: TopicPartition) -> int:
        return self._offsets.get(tp, -1)

    def changelog_offset(self, tp: TopicPartition) -> int:
        """The changelog offset the partition's store reflects (0: none recorded: replay from the start)."""
        return self._changelog.get(tp, 0)

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._open)

    def load(self, learner_id: str) -> LearnerState | None:
        for tp in self._open:
            if (row := self._rows[tp].get(learner_id)) is not None:
                return codec.decode(row)
        return None

    def write(self, states: list[LearnerState], offsets: dict[TopicPartition, int],
              changelog: dict[TopicPartition, int] | None = None) -> None:
        """All rows of a partition, its input offset and its changelog checkpoint, or nothing."""
        staged = {}
        for tp, group in _by_partition(states, offsets).items():
            assert tp in self._open, f"partition {tp} is not open in this store"
            rows = dict(self._rows[tp])
            rows.update((st.learner_id, _encode(st, self.fp16)) for st in group)
            staged[tp] = rows
        for tp, rows in staged.items():
            self._rows[tp] = rows
            if tp in offsets:
                self._offsets[tp] = offsets[tp]
            if changelog and tp in changelog:
                self._changelog[tp] = max(self._changelog.get(tp, 0), changelog[tp])

    def learners(self, tp: TopicPartition) -> Iterator[LearnerState]:
        return (codec.decode(r) for r in list(self._rows.get(tp, {}).values()))

    def count(self, tp: TopicPartition) -> int:
        return len(self._rows.get(tp, {}))

    def nbytes(self, tp: TopicPartition) -> int:
        return sum(len(r["blob"]) for r in self._rows.get(tp, {}).values())

    def drop_partitions(self, partitions: list[TopicPartition]) -> None:
        self._open.difference_update(partitions)

    def close(self) -> None:
        self._open.clear()
