"""Event archive: the events topic as Parquet files partitioned by event date.

Training reads history from here, in event-time order (DESIGN.md, "Fine-tuning"),
so it never rests on broker retention or on offset-by-time look-ups (which the
embedded broker does not support). Layout, one folder per event date (UTC)::

    FOLDER/event_date=2019-08-01/part-<topic>-<partition>-<first offset>-<last offset>.parquet
    FOLDER/event_date=none/...          events without an event time (not used for training)

Files use ``ktstream.data.eventlog``'s Parquet schema (canonical records).

Durability and offsets (at-least-once, made exactly-once on read):

1. ``Archiver`` validates each record as the engine does (``decode``: the
   event schema, the record key, event times past the clock plus
   ``max_clock_skew_s``), and ``ArchiveWriter`` turns each valid event into
   its Parquet row (``parquet_row``). A record that fails either is
   dead-lettered (original bytes, reason, source partition and offset) to the
   archiver's own dead-letter topic (reason ``unwritable`` for a row the
   columns cannot hold), so one bad record never fails a file, and every
   input offset becomes one archived row or one dead letter;
2. the writer buffers rows with their source offsets and flushes every
   ``flush_records`` records or ``flush_seconds`` seconds;
3. a flush first sends the buffered dead letters and waits for their
   acknowledgement, then writes each file to a hidden temporary name, fsyncs
   it, renames it into place (atomic) and fsyncs the folder;
4. only then does ``Archiver`` commit the offsets after the flushed records.

A crash between 3 and 4 re-archives those records on restart; the reader
(``ktstream.data.archive_reader``) drops the repeats by (learner id, event id),
and dead letters repeat with the same source offset. A write that fails for
the whole file (disk full, permissions) raises before any commit: nothing is
lost, the records are read again. Events the engine rejects for the learner's
state (``late``, ``duplicate``) or for its model (a response outside its
categories) are archived: the archive is the event history, judged by nobody's
state.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from ktstream.core import Output, Record, TopicPartition
from ktstream.data.eventlog import EventLogError, parquet_row, write_parquet
from ktstream.engine.decode import Rejected, decode
from ktstream.engine.exceptions import CommitError
from ktstream.engine.messages import dead_letter, now_ms
from ktstream.engine.records import Sink, Source

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
    max_clock_skew_s: float = Field(300.0, ge=0, description="events timed more than this after the clock are "
                                                            "dead-lettered (reason future), as the engine does")
    dead_letter_topic: str = Field("ktstream.archive-dead-letters", description="where records that are not "
                                   "archived go, with their reason and source offset (the engine's dead letters "
                                   "are its own)")
    dead_letter_timeout_s: float = Field(30.0, gt=0, description="longest wait for the dead letters' "
                                                                 "acknowledgement before a flush fails")
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(9466, ge=0, le=65535, description="/metrics, /healthz and /readyz (the "
                                                                       "engine's HTTP server); None: off")


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def event_date(record: dict[str, Any]) -> str:
    """UTC date of the event, the partition folder's value.

    >>> event_date({"event_time": 1564617600000}), event_date({}), event_date({"event_time": -1})
    ('2019-08-01', 'none', '1969-12-31')
    """
    t = record.get("event_time")
    return UNDATED if t is None else (_EPOCH + timedelta(milliseconds=t)).strftime("%Y-%m-%d")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(rows: list[dict[str, Any]], path: Path) -> None:
    """Write Parquet rows (``parquet_row``) so that the file is either absent or complete, also after a power
    loss."""
    tmp = path.with_name(f".{path.name}.tmp")
    write_parquet(rows, tmp, rows=True)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class ArchiveWriter:
    """Buffers Parquet rows with their source position; ``flush`` returns the offsets now safe to commit."""

    def __init__(self, folder: str | Path, flush_records: int = 10_000, flush_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.folder = Path(folder)
        self.flush_records, self.flush_seconds, self.clock = flush_records, flush_seconds, clock
        self._buffer: list[tuple[TopicPartition, int, tuple[str, dict[str, Any]] | None]] = []
        self._since: float | None = None
        self.written = self.skipped = 0

    def add(self, tp: TopicPartition, offset: int, record: dict[str, Any] | None) -> str | None:
        """Buffer one source record; ``None`` (invalid input) only advances the partition's offset.

        Returns None, or why the record cannot be written (it then only advances the offset too):
        the caller dead-letters it, and no file ever fails because of one record.
        """
        if self._since is None:
            self._since = self.clock()
        row, problem = None, None
        if record is not None:
            try:
                row = (event_date(record), parquet_row(record))
            except (EventLogError, OverflowError, TypeError) as exc:  # OverflowError: a date past year 9999
                problem = f"{type(exc).__name__}: {exc}"
        self._buffer.append((tp, offset, row))
        return problem

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
        for tp, offset, dated in self._buffer:
            commit[tp] = max(commit.get(tp, 0), offset + 1)
            if dated is not None:
                date, row = dated
                files.setdefault((date, tp), []).append((offset, row))
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
    """Poll a source, archive valid events, dead-letter the rest, commit offsets after each durable flush."""

    def __init__(self, source: Source, writer: ArchiveWriter, dead_letters: Sink,
                 settings: ArchiveSettings = ArchiveSettings()):
        self.source, self.writer, self.dead_letters, self.settings = source, writer, dead_letters, settings
        self._letters: list[tuple[TopicPartition, Output]] = []  # sent at the next flush, before the commit
        self.dead_lettered: Counter[str] = Counter()  # reason -> records
        self.last_step = time.monotonic()  # liveness: the loop polled
        self.joined = False  # readiness: a first assignment arrived
        source.on_assigned = lambda partitions: setattr(self, "joined", True)
        source.on_revoked = lambda partitions: self.flush()  # commit what we hold before it moves
        source.on_lost = self.drop

    def add(self, record: Record, not_after_ms: int | None = None) -> None:
        """Buffer one record as a row to archive or as a dead letter (``not_after_ms``: the clock plus the
        allowed skew, now if not given)."""
        if not_after_ms is None:
            not_after_ms = now_ms() + int(self.settings.max_clock_skew_s * 1000)
        out = decode(record, self.settings.max_record_bytes, not_after_ms)
        if isinstance(out, Rejected):
            self.writer.add(record.tp, record.offset, None)
            self._dead_letter(record, out.reason, out.detail)
            return
        problem = self.writer.add(record.tp, record.offset, out.event.to_record())
        if problem is not None:
            self._dead_letter(record, "unwritable", f"the archive's columns cannot hold it: {problem}")

    def _dead_letter(self, record: Record, reason: str, detail: str) -> None:
        self._letters.append((record.tp, dead_letter(self.settings.dead_letter_topic, record, reason, detail)))
        self.dead_lettered[reason] += 1

    def drop(self, partitions: list[TopicPartition]) -> None:
        """Forget what is buffered for partitions this member lost (another member re-reads them)."""
        lost = set(partitions)
        self.writer.drop(partitions)
        self._letters = [(tp, o) for tp, o in self._letters if tp not in lost]

    def step(self, timeout_s: float, max_records: int) -> int:
        """One poll; flush and commit when due. Returns the number of records polled."""
        self.last_step = time.monotonic()
        records = self.source.poll(timeout_s, max_records)
        not_after_ms = now_ms() + int(self.settings.max_clock_skew_s * 1000)
        for r in records:
            self.add(r, not_after_ms)
        if self.writer.due():
            self.flush()
        return len(records)

    def flush(self) -> None:
        """Dead letters acknowledged, then files durable, then the offsets committed (the order that
        loses nothing: a failure in either of the first two raises before any commit)."""
        if self._letters:
            self.dead_letters.send(o for _, o in self._letters)
            self.dead_letters.flush(self.settings.dead_letter_timeout_s)  # raises SinkError: nothing committed
            self._letters = []
        if len(self.writer):
            offsets = self.writer.flush()  # raises before any commit if a file cannot be written
            try:
                self.source.commit(offsets)
            except CommitError as exc:  # e.g. the partition moved: its new owner re-archives, the reader dedupes
                log.warning("files are durable but the commit failed (%s); the records may be archived twice", exc)
                return
            log.info("archived up to %s (%d written, %d dead-lettered)", offsets, self.writer.written,
                     self.writer.skipped)

    def run(self, settings: ArchiveSettings, should_stop: Callable[[], bool] = lambda: False) -> None:
        try:
            while not should_stop():
                self.step(settings.poll_timeout_s, settings.max_poll_records)
            self.flush()
        finally:
            self.source.close()
            self.dead_letters.close()


class ArchiveCollector:
    """The archiver's Prometheus series, read from its counters at each scrape (nothing on the poll path):
    ``ktstream_archive_events_written_total``, ``ktstream_archive_dead_letters_total{reason}``,
    ``ktstream_archive_records_buffered`` (polled, not yet durable)."""

    def __init__(self, archiver: Archiver):
        self.archiver = archiver

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        a = self.archiver
        yield CounterMetricFamily("ktstream_archive_events_written", "Events written to durable archive files.",
                                  value=a.writer.written)
        dead = CounterMetricFamily("ktstream_archive_dead_letters", "Records not archived, sent to the archive's "
                                   "dead-letter topic, by reason.", labels=["reason"])
        for reason, n in sorted(dict(a.dead_lettered).items()):
            dead.add_metric([reason], n)
        yield dead
        yield GaugeMetricFamily("ktstream_archive_records_buffered", "Records polled and not yet in a durable "
                                "file (their offsets are committed after the next flush).", value=len(a.writer))


def serve_metrics(archiver: Archiver, settings: ArchiveSettings):
    """The archiver's ``/metrics`` (its series and the standard process series), ``/healthz`` (200 while the
    loop has polled within a minute plus its poll timeout) and ``/readyz`` (200 once it was assigned
    partitions), on the engine's bounded HTTP server; the caller closes it."""
    from prometheus_client import CollectorRegistry

    from ktstream.engine.metrics import with_process_series
    from ktstream.engine.server import MetricsServer

    registry = with_process_series(CollectorRegistry())
    registry.register(ArchiveCollector(archiver))
    window_s = 60.0 + settings.poll_timeout_s
    return MetricsServer(registry, lambda: time.monotonic() - archiver.last_step < window_s,
                         lambda: archiver.joined, settings.metrics_host, settings.metrics_port)


def kafka_archiver(kafka_settings, settings: ArchiveSettings) -> Archiver:
    """An archiver on the events topic, in its own consumer group, dead letters through its own producer
    (lazy: no network call yet)."""
    from connectors.kafka import output_sink_for, source_for

    source = source_for(kafka_settings.model_copy(update={"group_id": settings.group_id}),
                         max_poll_records=settings.max_poll_records)
    writer = ArchiveWriter(settings.folder, settings.flush_records, settings.flush_seconds)
    return Archiver(source, writer, output_sink_for(kafka_settings), settings)
