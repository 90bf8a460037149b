"""The SQLite backend: ``<directory>/<topic>-<partition>.sqlite``, WAL mode, one transaction per write.

See ktstream.state.store for why SQLite, and for the contract (``MemoryStore``
is its in-memory twin; both pass tests/state/).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterator

from ktstream.engine.learner import LearnerState
from ktstream.engine.records import TopicPartition
from ktstream.state import codec
from ktstream.state.store import _INSERT, _SCHEMA, _by_partition


def partition_path(directory: str | Path, tp: TopicPartition) -> Path:
    return Path(directory) / f"{tp[0]}-{tp[1]}.sqlite"


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(_SCHEMA)
    return conn


class SqliteStore:
    def __init__(self, directory: str | Path, fp16: bool = False):
        self.directory, self.fp16 = Path(directory), fp16
        self.directory.mkdir(parents=True, exist_ok=True)
        self._conns: dict[TopicPartition, sqlite3.Connection] = {}

    def open(self, tp: TopicPartition) -> int:
        """Open (or create) a partition's database; the input offset it reflects (-1: none yet)."""
        if tp not in self._conns:
            self._conns[tp] = connect(partition_path(self.directory, tp))
        return self.offset(tp)

    def offset(self, tp: TopicPartition) -> int:
        conn = self._conns.get(tp)
        if conn is None:
            if not partition_path(self.directory, tp).exists():
                return -1
            conn = self._conns[tp] = connect(partition_path(self.directory, tp))
        row = conn.execute("SELECT next_offset FROM offsets WHERE topic=? AND part=?", tp).fetchone()
        return -1 if row is None else int(row[0])

    def changelog_offset(self, tp: TopicPartition) -> int:
        """The changelog offset the partition's store reflects (0: none recorded: replay from the start)."""
        self.open(tp)
        row = self._conns[tp].execute("SELECT next_offset FROM changelog WHERE topic=? AND part=?", tp).fetchone()
        return 0 if row is None else int(row[0])

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._conns)

    def load(self, learner_id: str) -> LearnerState | None:
        for conn in self._conns.values():
            row = conn.execute("SELECT * FROM learners WHERE learner_id=?", (learner_id,)).fetchone()
            if row is not None:
                return codec.decode(dict(row))
        return None

    def write(self, states: list[LearnerState], offsets: dict[TopicPartition, int],
              changelog: dict[TopicPartition, int] | None = None) -> None:
        """Per partition, its learners' rows, its input offset and its changelog checkpoint (the
        offset after the last changelog record of the states written) in one transaction."""
        for tp, group in _by_partition(states, offsets).items():
            conn = self._conns.get(tp)
            assert conn is not None, f"partition {tp} is not open in this store"
            conn.execute("BEGIN IMMEDIATE")
            try:
                for st in group:
                    row = codec.encode(st, self.fp16)
                    conn.execute(_INSERT, [row[c] for c in codec.COLUMNS])
                if tp in offsets:
                    conn.execute("INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)", (tp[0], tp[1], offsets[tp]))
                if changelog and tp in changelog:
                    conn.execute("INSERT INTO changelog VALUES (?, ?, ?) ON CONFLICT (topic, part) DO UPDATE SET "
                                 "next_offset = MAX(next_offset, excluded.next_offset)", (tp[0], tp[1], changelog[tp]))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def learners(self, tp: TopicPartition) -> Iterator[LearnerState]:
        self.open(tp)
        for row in self._conns[tp].execute("SELECT * FROM learners ORDER BY learner_id"):
            yield codec.decode(dict(row))

    def count(self, tp: TopicPartition) -> int:
        self.open(tp)
        return int(self._conns[tp].execute("SELECT COUNT(*) FROM learners").fetchone()[0])

    def nbytes(self, tp: TopicPartition) -> int:
        self.open(tp)
        return int(self._conns[tp].execute("SELECT COALESCE(SUM(LENGTH(blob)), 0) FROM learners").fetchone()[0])

    def drop_partitions(self, partitions: list[TopicPartition]) -> None:
        """Close their databases (the files stay: they reflect their offsets and may come back)."""
        for tp in partitions:
            conn = self._conns.pop(tp, None)
            if conn is not None:
                conn.close()

    def close(self) -> None:
        self.drop_partitions(list(self._conns))
