"""The SQLite backend: ``<directory>/<topic>-<partition>.sqlite``, WAL mode, one SQLite transaction per commit.

See ktstream.state.store for why SQLite, and for the contract (Store ->
StorePartition -> Transaction; ``MemoryStore`` is its in-memory twin; both pass
tests/state/test_store_contract.py). A transaction encodes its states on
``put`` and touches the file only in ``commit``.

A partition's file is checked when it is opened (``PRAGMA quick_check``: every
page and index, no row-by-row comparison). A file that is not a database or
has damaged pages is moved aside, with its ``-wal`` / ``-shm``, to
``<name>.corrupt-<UTC time>`` (an error in the log, ``on_quarantine`` called:
the engine counts ``ktstream_state_stores_quarantined_total``), and an empty
store takes its place: offset -1, changelog checkpoint 0, so the restore on
assignment rebuilds the partition from its whole changelog.

A commit that fails (a full disk, a damaged page met later) raises `StoreError`
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

from ktstream.core import LearnerState, TopicPartition
from ktstream.state import codec
from ktstream.state.metrics import StateMetrics
from ktstream.state.store import PartitionedStore, StoreError, encode_row

log = logging.getLogger(__name__)

#: SQLite's result codes for a file that is not a sound database (anything else, e.g. a locked or
#: unwritable file, is an operational error and never moves a store aside).
CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
SIDE_FILES = ("", "-wal", "-shm", "-journal")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS learners (learner_id TEXT PRIMARY KEY, blob BLOB NOT NULL, model_version TEXT,
  topic TEXT, part INTEGER, step_key TEXT, last_event_time_ms INTEGER, last_event_id TEXT,
  last_offset INTEGER, events INTEGER, responses INTEGER, late INTEGER);
CREATE TABLE IF NOT EXISTS offsets (topic TEXT, part INTEGER, next_offset INTEGER, PRIMARY KEY (topic, part));
CREATE TABLE IF NOT EXISTS changelog (topic TEXT, part INTEGER, next_offset INTEGER, PRIMARY KEY (topic, part));
"""
_INSERT = (f"INSERT OR REPLACE INTO learners ({', '.join(codec.COLUMNS)}) "
           f"VALUES ({', '.join('?' * len(codec.COLUMNS))})")


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


class SqliteTransaction:
    """Staged rows (encoded on ``put``); ``commit`` writes them and the offsets in one SQLite transaction."""

    def __init__(self, part: "SqlitePartition"):
        self.part = part
        self.rows: list[list] = []
        self.done = False

    def put(self, st: LearnerState) -> None:
        row = encode_row(st, self.part.fp16)
        self.rows.append([row[c] for c in codec.COLUMNS])

    def commit(self, offset: int | None = None, changelog_offset: int | None = None) -> None:
        assert not self.done, "a transaction commits once"
        self.done = True
        conn, tp = self.part.conn, self.part.tp
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_INSERT, self.rows)
            if offset is not None:
                conn.execute("INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)", (tp[0], tp[1], offset))
            if changelog_offset is not None:
                conn.execute("INSERT INTO changelog VALUES (?, ?, ?) ON CONFLICT (topic, part) DO UPDATE SET "
                             "next_offset = MAX(next_offset, excluded.next_offset)", (tp[0], tp[1], changelog_offset))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _roll_back(conn)
            raise StoreError(f"cannot write {len(self.rows)} learner states of partition {tp} to "
                             f"{self.part.path}: {exc}") from exc
        except BaseException:
            _roll_back(conn)
            raise


class SqlitePartition:
    """One partition's database file, open."""

    def __init__(self, tp: TopicPartition, path: Path, conn: sqlite3.Connection, fp16: bool):
        self.tp, self.path, self.conn, self.fp16 = tp, path, conn, fp16

    def offset(self) -> int:
        row = self.conn.execute("SELECT next_offset FROM offsets WHERE topic=? AND part=?", self.tp).fetchone()
        return -1 if row is None else int(row[0])

    def changelog_offset(self) -> int:
        row = self.conn.execute("SELECT next_offset FROM changelog WHERE topic=? AND part=?", self.tp).fetchone()
        return 0 if row is None else int(row[0])

    def load(self, learner_id: str) -> LearnerState | None:
        try:
            row = self.conn.execute("SELECT * FROM learners WHERE learner_id=?", (learner_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read learner {learner_id!r} from {self.path}: {exc}") from exc
        return None if row is None else codec.decode(dict(row))

    def learners(self) -> Iterator[LearnerState]:
        for row in self.conn.execute("SELECT * FROM learners ORDER BY learner_id"):
            yield codec.decode(dict(row))

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM learners").fetchone()[0])

    def nbytes(self) -> int:
        return int(self.conn.execute("SELECT COALESCE(SUM(LENGTH(blob)), 0) FROM learners").fetchone()[0])

    def begin(self) -> SqliteTransaction:
        return SqliteTransaction(self)

    def close(self) -> None:
        self.conn.close()


class SqliteStore(PartitionedStore):
    def __init__(self, directory: str | Path, fp16: bool = False,
                 on_quarantine: Callable[[TopicPartition, Path], None] | None = None,
                 metrics: StateMetrics | None = None):
        """``on_quarantine(tp, moved_to)``: told of each damaged file moved aside (the engine counts them)."""
        super().__init__(metrics)
        self.directory, self.fp16 = Path(directory), fp16
        self.directory.mkdir(parents=True, exist_ok=True)
        self.on_quarantine = on_quarantine or (lambda tp, moved_to: None)

    def _open(self, tp: TopicPartition) -> SqlitePartition:
        """A checked connection; a damaged file is moved aside and replaced by an empty store."""
        path = partition_path(self.directory, tp)
        conn = None
        try:
            conn = connect(path)
            check(conn)
            return SqlitePartition(tp, path, conn, self.fp16)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", None) not in CORRUPT:
                raise StoreError(f"cannot open the state store {path}: {exc}") from exc
            if conn is not None:
                conn.close()
            aside = quarantine(path)
            log.error("state store %s is damaged (%s): moved aside to %s; partition %s starts empty and is "
                      "rebuilt from its changelog", path, exc, aside, tp)
            self.on_quarantine(tp, aside)
            return SqlitePartition(tp, path, connect(path), self.fp16)

    def _closed_offset(self, tp: TopicPartition) -> int:
        """-1 without a file; else the file is opened (and stays open)."""
        return self.open(tp) if partition_path(self.directory, tp).exists() else -1


def _roll_back(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it does on a full disk, for one)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:  # the write's own error is the one to report
            log.warning("rollback failed: %s", exc)
