"""The SQLite backend: ``<directory>/<topic>-<partition>.sqlite``, WAL mode, one transaction per write.

See ktstream.state.store for why SQLite, and for the contract (``MemoryStore``
is its in-memory twin; both pass tests/state/).

A partition's file is checked when it is opened (``PRAGMA quick_check``: every
page and index, no row-by-row comparison). A file that is not a database or
has damaged pages is moved aside, with its ``-wal`` / ``-shm``, to
``<name>.corrupt-<UTC time>`` (an error in the log, ``on_quarantine`` called:
the engine counts ``ktstream_state_stores_quarantined_total``), and an empty
store takes its place: offset -1, changelog checkpoint 0, so the restore on
assignment rebuilds the partition from its whole changelog.

A write that fails (a full disk, a damaged page met later) raises `StoreError`
with SQLite's own reason; the partition's transaction is rolled back (SQLite
may already have done so itself) and nothing of it is written.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from pathlib import Path
from typing import Callable, Iterator

from ktstream.engine.learner import LearnerState
from ktstream.engine.records import TopicPartition
from ktstream.state import codec
from ktstream.state.store import _INSERT, _SCHEMA, StoreError, _by_partition, _encode

log = logging.getLogger(__name__)

#: SQLite's result codes for a file that is not a sound database (anything else, e.g. a locked or
#: unwritable file, is an operational error and never moves a store aside).
CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
SIDE_FILES = ("", "-wal", "-shm", "-journal")


#: A Kafka topic name (letters, digits, ``.``, ``_``, ``-``; at most 249; not ``.`` or ``..``): never a path.
TOPIC_NAME = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9._-]{1,249}$")


def partition_path(directory: str | Path, tp: TopicPartition) -> Path:
    """``<directory>/<topic>-<partition>.sqlite``; a name that is not a Kafka topic or partition is a StoreError
    (so no name, e.g. from an imported file, can point outside ``directory``)."""
    topic, part = tp
    if not isinstance(topic, str) or not TOPIC_NAME.match(topic):
        raise StoreError(f"{topic!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)")
    if isinstance(part, bool) or not isinstance(part, int) or part < 0:
        raise StoreError(f"{part!r} is not a partition number (an integer >= 0)")
    return Path(directory) / f"{topic}-{part}.sqlite"


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(_SCHEMA)
    return conn


def check(conn: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError (SQLITE_CORRUPT) unless ``PRAGMA quick_check`` finds the file sound."""
    problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        exc = sqlite3.DatabaseError("; ".join(problems))
        exc.sqlite_errorname = "SQLITE_CORRUPT"
        raise exc


def quarantine(path: Path) -> Path:
    """Move a damaged database and its side files to ``<name>.corrupt-<UTC time>``; the new main path."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"{time.time() % 1:.6f}"[1:]
    aside = path.with_name(f"{path.name}.corrupt-{stamp}Z")
    for suffix in SIDE_FILES:
        src = Path(f"{path}{suffix}")
        if src.exists():
            src.rename(f"{aside}{suffix}")
    return aside


class SqliteStore:
    def __init__(self, directory: str | Path, fp16: bool = False,
                 on_quarantine: Callable[[TopicPartition, Path], None] | None = None):
        """``on_quarantine(tp, moved_to)``: told of each damaged file moved aside (the engine counts them)."""
        self.directory, self.fp16 = Path(directory), fp16
        self.directory.mkdir(parents=True, exist_ok=True)
        self.on_quarantine = on_quarantine or (lambda tp, moved_to: None)
        self._conns: dict[TopicPartition, sqlite3.Connection] = {}

    def open(self, tp: TopicPartition) -> int:
        """Open (or create) a partition's database; the input offset it reflects (-1: none yet)."""
        if tp not in self._conns:
            self._conns[tp] = self._connect(tp)
        return self.offset(tp)

    def _connect(self, tp: TopicPartition) -> sqlite3.Connection:
        """A checked connection; a damaged file is moved aside and replaced by an empty store."""
        path = partition_path(self.directory, tp)
        conn = None
        try:
            conn = connect(path)
            check(conn)
            return conn
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", None) not in CORRUPT:
                raise StoreError(f"cannot open the state store {path}: {exc}") from exc
            if conn is not None:
                conn.close()
            aside = quarantine(path)
            log.error("state store %s is damaged (%s): moved aside to %s; partition %s starts empty and is "
                      "rebuilt from its changelog", path, exc, aside, tp)
            self.on_quarantine(tp, aside)
            return connect(path)

    def offset(self, tp: TopicPartition) -> int:
        conn = self._conns.get(tp)
        if conn is None:
            if not partition_path(self.directory, tp).exists():
                return -1
            conn = self._conns[tp] = self._connect(tp)
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
        for tp, conn in self._conns.items():
            try:
                row = conn.execute("SELECT * FROM learners WHERE learner_id=?", (learner_id,)).fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read learner {learner_id!r} from {partition_path(self.directory, tp)}: "
                                 f"{exc}") from exc
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
            try:
                conn.execute("BEGIN IMMEDIATE")
                for st in group:
                    row = _encode(st, self.fp16)
                    conn.execute(_INSERT, [row[c] for c in codec.COLUMNS])
                if tp in offsets:
                    conn.execute("INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)", (tp[0], tp[1], offsets[tp]))
                if changelog and tp in changelog:
                    conn.execute("INSERT INTO changelog VALUES (?, ?, ?) ON CONFLICT (topic, part) DO UPDATE SET "
                                 "next_offset = MAX(next_offset, excluded.next_offset)", (tp[0], tp[1], changelog[tp]))
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _roll_back(conn)
                raise StoreError(f"cannot write {len(group)} learner states of partition {tp} to "
                                 f"{partition_path(self.directory, tp)}: {exc}") from exc
            except BaseException:
                _roll_back(conn)
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


def _roll_back(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it does on a full disk, for one)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:  # the write's own error is the one to report
            log.warning("rollback failed: %s", exc)
