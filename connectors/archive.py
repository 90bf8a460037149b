"""Event archive: the events topic as Parquet files partitioned by event date.

Training reads history from here, in event-time order (DESIGN.md, "Fine-tuning"),
so it never rests on broker retention or on offset-by-time look-ups (which the
embedded broker does not support). Layout, one folder per event date (UTC)::

    FOLDER/event_date=2019-08-01/part-<topic>-<partition>-<first offset>-<last offset>.parquet
    FOLDER/event_date=none/...          events without an event time (not used for training)

Files use ``ktstream.data.eventlog``'s Parquet schema (canonical records).

Durability and offsets (at-least-once, made exactly-once on read):

1. ``ArchiveWriter`` buffers decoded records with their source offsets and
   flushes every ``flush_records`` records or ``flush_seconds`` seconds;
2. a flush writes each file to a hidden temporary name, fsyncs it, renames it
   into place (atomic) and fsyncs the folder;
3. only then does ``Archiver`` commit the offsets after the flushed records.

A crash between 2 and 3 re-archives those records on restart; the reader
(``ktstream.data.archive_reader``) drops the repeats by (learner id, event id).
Records that fail validation advance the offset but are not archived: the
engine dead-letters them (invariant 6); the archiver only counts them.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from ktstream.data.eventlog import write_parquet
from ktstream.engine.decode import Decoded, decode
from ktstream.engine.exceptions import CommitError
from ktstream.engine.records import Record, Source, TopicPartition

log = logging.getLogger(__name__)
UNDATED = "none"


class ArchiveSettings(BaseModel):
    """The ``archive`` section of ``ktstream archive --config FILE``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    folder: str = "archive"
    group_id: str = Field("ktstream-archive", description="its own consumer group, beside the engine's")
    flush_records: int = Field(10_000, ge=1)
    flush_seconds: float = Field(60.0, gt=0)
    poll_timeout_s: float = Field(1.0, ge=0)
    max_poll_records: int = Field(1000, ge=1)
    max_record_bytes: int = Field(65_536, ge=256)


def event_date(record: dict[str, Any]) -> str:
    """UTC date of the event, the partition folder's value.

    >>> event_date({"event_time": 1564617600000}), event_date({})
    ('2019-08-01', 'none')
    """
    t = record.get("event_time")
    return UNDATED if t is None else datetime.fromtimestamp(t / 1000.0, tz=timezone.utc).strftime("%Y-%m-%d")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(records: list[dict[str, Any]], path: Path) -> None:
    """Write a Parquet file so that it is either absent or complete, also after a power loss."""
    tmp = path.with_name(f".{path.name}.tmp")
    write_parquet(records, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class ArchiveWriter:
    """Buffers records with their source position; ``flush`` returns the offsets now safe to commit."""

    def __init__(self, folder: str | Path, flush_records: int = 10_000, flush_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.folder = Path(folder)
        self.flush_records, self.flush_seconds, self.clock = flush_records, flush_seconds, clock
        self._buffer: list[tuple[TopicPartition, int, dict[str, Any] | None]] = []
        self._since: float | None = None
        self.written = self.skipped = 0

    def add(self, tp: TopicPartition, offset: int, record: dict[str, Any] | None) -> None:
        """Buffer one source record; ``None`` (invalid input) only advances the partition's offset."""
        if self._since is None:
            self._since = self.clock()
        self._buffer.append((tp, offset, record))

    def __len__(self) -> int:
        return len(self._buffer)

    def due(self) -> bool:
        return bool(self._buffer) and (len(self._buffer) >= self.flush_records
                                       or self.clock() - self._since >= self.flush_seconds)

    def flush(self) -> dict[TopicPartition, int]:
        """Write every buffered record durably; return {partition: next offset} to commit.

        If a write fails the buffer is kept and the error propagates: nothing is committed.
        """
        files: dict[tuple[str, TopicPartition], list[tuple[int, dict[str, Any]]]] = {}
        commit: dict[TopicPartition, int] = {}
        for tp, offset, rec in self._buffer:
            commit[tp] = max(commit.get(tp, 0), offset + 1)
            if rec is not None:
                files.setdefault((event_date(rec), tp), []).append((offset, rec))
        for (date, (topic, partition)), rows in sorted(files.items()):
            folder = self.folder / f"event_date={date}"
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                _fsync_dir(self.folder)
            name = f"part-{topic}-{partition:04d}-{rows[0][0]:012d}-{rows[-1][0]:012d}.parquet"
            write_durably([r for _, r in rows], folder / name)
        self.written += sum(len(rows) for rows in files.values())
        self.skipped += sum(1 for *_, r in self._buffer if r is None)
        self._buffer, self._since = [], None
        return commit

    def drop(self, partitions: list[TopicPartition]) -> None:
        """Forget buffered records of partitions this member lost (another member re-reads them)."""
        lost = set(partitions)
        self._buffer = [b for b in self._buffer if b[0] not in lost]
        if not self._buffer:
            self._since = None


class Archiver:
    """Poll a source, archive valid events, commit offsets after each durable flush."""

    def __init__(self, source: Source, writer: ArchiveWriter, max_record_bytes: int = 65_536):
        self.source, self.writer, self.max_record_bytes = source, writer, max_record_bytes
        source.on_revoked = lambda partitions: self.flush()  # commit what we hold before it moves
        source.on_lost = writer.drop

    def add(self, record: Record) -> None:
        out = decode(record, self.max_record_bytes)
        self.writer.add(record.tp, record.offset, out.event.to_record() if isinstance(out, Decoded) else None)

    def step(self, timeout_s: float, max_records: int) -> int:
        """One poll; flush and commit when due. Returns the number of records polled."""
        records = self.source.poll(timeout_s, max_records)
        for r in records:
            self.add(r)
        if self.writer.due():
            self.flush()
        return len(records)

    def flush(self) -> None:
        if len(self.writer):
            offsets = self.writer.flush()  # raises before any commit if a file cannot be written
            try:
                self.source.commit(offsets)
            except CommitError as exc:  # e.g. the partition moved: its new owner re-archives, the reader dedupes
                log.warning("files are durable but the commit failed (%s); the records may be archived twice", exc)
                return
            log.info("archived up to %s (%d written, %d invalid skipped)", offsets, self.writer.written,
                     self.writer.skipped)

    def run(self, settings: ArchiveSettings, should_stop: Callable[[], bool] = lambda: False) -> None:
        try:
            while not should_stop():
                self.step(settings.poll_timeout_s, settings.max_poll_records)
            self.flush()
        finally:
            self.source.close()


def kafka_archiver(kafka_settings, settings: ArchiveSettings) -> Archiver:
    """An archiver on the events topic, in its own consumer group (lazy: no network call yet)."""
    from connectors.kafka import KafkaSource

    source = KafkaSource(kafka_settings.model_copy(update={"group_id": settings.group_id}),
                         max_poll_records=settings.max_poll_records)
    writer = ArchiveWriter(settings.folder, settings.flush_records, settings.flush_seconds)
    return Archiver(source, writer, settings.max_record_bytes)
