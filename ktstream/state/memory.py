"""The in-memory backend (tests, benchmarks): the contract of ktstream.state.store, no file.

A partition's rows, input offset and changelog checkpoint survive ``close`` and
``drop_partitions`` (the same ``MemoryStore`` reopened sees them), as a
partition's SQLite file does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from ktstream.core import LearnerState, TopicPartition
from ktstream.state import codec
from ktstream.state.metrics import StateMetrics
from ktstream.state.store import PartitionedStore, encode_row

Row = dict[str, Any]


@dataclass
class _Data:
    """One partition's durable data."""

    rows: dict[str, Row] = field(default_factory=dict)
    offset: int = -1
    changelog: int = 0


class MemoryTransaction:
    def __init__(self, data: _Data, fp16: bool):
        self.data, self.fp16 = data, fp16
        self.rows: dict[str, Row] = {}
        self.done = False

    def put(self, st: LearnerState) -> None:
        self.rows[st.learner_id] = encode_row(st, self.fp16)

    def commit(self, offset: int | None = None, changelog_offset: int | None = None) -> None:
        assert not self.done, "a transaction commits once"
        self.done = True
        self.data.rows.update(self.rows)  # encoded on put: nothing here can fail half-way
        if offset is not None:
            self.data.offset = offset
        if changelog_offset is not None:
            self.data.changelog = max(self.data.changelog, changelog_offset)


class MemoryPartition:
    def __init__(self, tp: TopicPartition, data: _Data, fp16: bool):
        self.tp, self.data, self.fp16 = tp, data, fp16

    def offset(self) -> int:
        return self.data.offset

    def changelog_offset(self) -> int:
        return self.data.changelog

    def load(self, learner_id: str) -> LearnerState | None:
        row = self.data.rows.get(learner_id)
        return None if row is None else codec.decode(row)

    def learners(self) -> Iterator[LearnerState]:
        return (codec.decode(self.data.rows[lid]) for lid in sorted(self.data.rows))

    def count(self) -> int:
        return len(self.data.rows)

    def nbytes(self) -> int:
        return sum(len(r["blob"]) for r in self.data.rows.values())

    def begin(self) -> MemoryTransaction:
        return MemoryTransaction(self.data, self.fp16)

    def close(self) -> None:
        return None


class MemoryStore(PartitionedStore):
    def __init__(self, fp16: bool = False, metrics: StateMetrics | None = None):
        super().__init__(metrics)
        self.fp16 = fp16
        self._data: dict[TopicPartition, _Data] = {}

    def _open(self, tp: TopicPartition) -> MemoryPartition:
        return MemoryPartition(tp, self._data.setdefault(tp, _Data()), self.fp16)

    def _closed_offset(self, tp: TopicPartition) -> int:
        data = self._data.get(tp)
        return -1 if data is None else data.offset
