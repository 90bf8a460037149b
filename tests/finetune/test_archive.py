"""Event archive: date-partitioned Parquet, durable before commit, read back in event-time order."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from connectors import archive as archive_module
from connectors.archive import Archiver, ArchiveSettings, ArchiveWriter, kafka_archiver
from ktstream.core import Record
from ktstream.data.archive_reader import archive_files, archive_summary, read_archive
from ktstream.data.eventlog import PARQUET_SCHEMA
from ktstream.data.simulate import simulate
from ktstream.engine.records import MemorySink, MemorySource
from ktstream.schema import DeadLetter

DAY_MS = 86_400_000


def events(n_learners: int = 6) -> list[dict]:
    return simulate(n_learners=n_learners, n_items=15, n_concepts=4, mean_length=20, seed=2,
                    start_spread_ms=4 * DAY_MS, mean_gap_ms=6 * 3_600_000)


def as_records(recs: list[dict], partitions: int = 2) -> list[Record]:
    """Keyed by learner, one partition per learner hash, offsets in order (as the broker would)."""
    out, next_offset = [], {}
    for r in recs:
        p = int(r["learner_id"][1:]) % partitions
        off = next_offset.get(p, 0)
        next_offset[p] = off + 1
        out.append(Record("events", p, off, r["learner_id"].encode(), json.dumps(r).encode()))
    return out


def canonical_order(recs):
    return sorted(recs, key=lambda r: (r["event_time"], r["learner_id"], r.get("seq", 0)))


def test_round_trip_partitioned_by_event_date(tmp_path):
    recs = events()
    writer = ArchiveWriter(tmp_path, flush_records=10_000)
    for rec, src in zip(recs, as_records(recs)):
        writer.add(src.tp, src.offset, rec)
    offsets = writer.flush()
    assert offsets == {("events", p): n for p, n in ((0, sum(int(r["learner_id"][1:]) % 2 == 0 for r in recs)),
                                                     (1, sum(int(r["learner_id"][1:]) % 2 == 1 for r in recs)))}
    dates = {p.parent.name for p in archive_files(tmp_path)}
    assert dates == {f"event_date={archive_module.event_date(r)}" for r in recs} and len(dates) > 2
    for path in archive_files(tmp_path):
        assert pq.read_schema(path).equals(PARQUET_SCHEMA)
        assert {archive_module.event_date(r) for r in pq.read_table(path).to_pylist()} == {path.parent.name[11:]}
    back = read_archive(tmp_path)
    assert back == canonical_order(recs)
    assert not list(tmp_path.rglob(".*.tmp")), "no temporary file is left behind"


def test_date_filter_and_summary(tmp_path):
    recs = events()
    writer = ArchiveWriter(tmp_path)
    for i, rec in enumerate(recs):
        writer.add(("events", 0), i, rec)
    writer.flush()
    times = sorted(r["event_time"] for r in recs)
    lo, hi = times[len(times) // 3], times[2 * len(times) // 3]
    assert read_archive(tmp_path, lo, hi) == [r for r in canonical_order(recs) if lo <= r["event_time"] < hi]
    s = archive_summary(tmp_path)
    assert (s["rows"], s["min_event_time_ms"], s["max_event_time_ms"]) == (len(recs), times[0], times[-1])


def test_rearchived_records_after_a_crash_are_read_once(tmp_path):
    recs = events()
    srcs = as_records(recs)
    first = ArchiveWriter(tmp_path)
    for rec, src in zip(recs[:50], srcs[:50]):
        first.add(src.tp, src.offset, rec)
    first.flush()  # ... and the process dies before committing: a restart reads them again
    again = ArchiveWriter(tmp_path, flush_records=7)
    for rec, src in zip(recs[20:], srcs[20:]):  # different flush boundaries this time
        again.add(src.tp, src.offset, rec)
        if again.due():
            again.flush()
    again.flush()
    assert archive_summary(tmp_path)["rows"] > len(recs) and read_archive(tmp_path) == canonical_order(recs)


def test_flush_by_count_and_by_time():
    now = [0.0]
    w = ArchiveWriter("unused", flush_records=3, flush_seconds=10.0, clock=lambda: now[0])
    assert not w.due()
    w.add(("e", 0), 0, {"learner_id": "u"})
    now[0] = 9.9
    assert not w.due()
    now[0] = 10.0
    assert w.due()
    w2 = ArchiveWriter("unused", flush_records=3, flush_seconds=10.0, clock=lambda: 0.0)
    for i in range(3):
        assert not w2.due()
        w2.add(("e", 0), i, None)
    assert w2.due()


def test_offsets_are_committed_only_after_the_file_is_durable(tmp_path, monkeypatch):
    recs = events(2)
    bad = Record("events", 0, len(recs), b"u0", b"{not json")
    source = MemorySource(as_records(recs, partitions=1) + [bad])
    dead = MemorySink()
    archiver = Archiver(source, ArchiveWriter(tmp_path, flush_records=10_000), dead)
    archiver.step(0.0, 10_000)
    real = archive_module.os.replace

    def crash(*args):
        raise OSError("disk gone")

    monkeypatch.setattr(archive_module.os, "replace", crash)
    with pytest.raises(OSError):
        archiver.flush()
    assert source.committed == {} and read_archive(tmp_path) == []
    monkeypatch.setattr(archive_module.os, "replace", real)
    archiver.flush()  # the buffer was kept: nothing lost
    assert source.committed == {("events", 0): len(recs) + 1}  # the invalid record's offset is done too
    assert read_archive(tmp_path) == canonical_order(recs) and archiver.writer.skipped == 1
    (letter,) = [DeadLetter.model_validate_json(o.value) for o in dead.flushed]
    assert (letter.reason, letter.source.offset) == ("invalid_json", len(recs))


def test_lost_partitions_are_dropped_without_commit(tmp_path):
    recs = events(4)
    source = MemorySource(as_records(recs, partitions=2))
    archiver = Archiver(source, ArchiveWriter(tmp_path, flush_records=10_000), MemorySink())
    archiver.step(0.0, 10_000)
    source.on_lost([("events", 1)])
    archiver.flush()
    assert set(source.committed) == {("events", 0)}
    assert {r["learner_id"] for r in read_archive(tmp_path)} == {r["learner_id"] for r in recs
                                                                 if int(r["learner_id"][1:]) % 2 == 0}


@pytest.mark.broker
@pytest.mark.timeout(120)
def test_archive_from_the_embedded_broker(tmp_path):
    broker_mod = pytest.importorskip("connectors.broker")
    from connectors.kafka import KafkaSink
    from ktstream.config import KafkaSettings
    from ktstream.core import Output

    recs = events(4)
    with broker_mod.EmbeddedBroker() as broker:
        broker.create_topics(["archive-events"], partitions=2)
        settings = KafkaSettings(bootstrap_servers=broker.bootstrap_servers, session_timeout_ms=6000,
                                 topics={"events": "archive-events"})
        sink = KafkaSink(settings)
        sink.send(Output("archive-events", r["learner_id"].encode(), json.dumps(r).encode()) for r in recs)
        sink.flush(30.0)
        sink.close()
        cfg = ArchiveSettings(folder=str(tmp_path), flush_records=25, flush_seconds=2.0, poll_timeout_s=0.5)
        archiver = kafka_archiver(settings, cfg)
        deadline = time.monotonic() + 90
        try:
            while archiver.writer.written < len(recs) and time.monotonic() < deadline:
                archiver.step(cfg.poll_timeout_s, cfg.max_poll_records)
            archiver.flush()
            committed = sum(archiver.source.committed(tp) or 0 for tp in archiver.source.assignment())
        finally:
            archiver.source.close()
    assert read_archive(tmp_path) == canonical_order(recs)
    assert committed == len(recs)


def test_a_failed_commit_keeps_the_archive_and_the_archiver_running(tmp_path):
    from ktstream.engine.exceptions import CommitError

    class Moved(MemorySource):
        def commit(self, offsets):
            raise CommitError("partition reassigned")

    recs = events(2)
    archiver = Archiver(Moved(as_records(recs, partitions=1)), ArchiveWriter(tmp_path, flush_records=5),
                        MemorySink())
    while archiver.step(0.0, 7):
        pass
    archiver.flush()
    assert read_archive(tmp_path) == canonical_order(recs) and len(archiver.writer) == 0


def test_archive_cli_reads_its_sections_and_stops(tmp_path, caplog, capsys):
    """Config parsing end to end; no poll happens (stop at once), so no broker is needed."""
    import logging

    import yaml

    from ktstream.cli.main import main

    path = tmp_path / "archive.yaml"
    path.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": {"events": "ev"}},
                                    "archive": {"folder": str(tmp_path / "a"), "flush_records": 5}}))
    with caplog.at_level(logging.INFO, logger="ktstream.cli.archive"):
        assert main(["archive", "--config", str(path), "--max-seconds", "0"]) == 0
    assert "archiving ev into" in caplog.text and "archived 0 events" in caplog.text
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"archive": {"flush_records": 0}}))
    assert main(["archive", "--config", str(bad), "--max-seconds", "0"]) == 1  # a ConfigError: one line, exit 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("ktstream: error:") and "archive" in error and "\n" not in error


def test_environment_overrides_the_trainer_and_archive_sections(tmp_path, monkeypatch):
    """KTSTREAM_<SECTION>__<FIELD> wins over the file, as for `ktstream serve`; nested fields too."""
    from ktstream.config import KafkaSettings
    from ktstream.exceptions import ConfigError
    from ktstream.finetune.settings import TrainerSettings, section

    path = tmp_path / "trainer.yaml"
    path.write_text("trainer: {archive: /a, registry: /r, finetune: {epochs: 5, lr: 0.01}}\n"
                    "kafka: {group_id: from-file}\n")
    monkeypatch.setenv("KTSTREAM_TRAINER__REGISTRY", "/mnt/registry")
    monkeypatch.setenv("KTSTREAM_TRAINER__FINETUNE__EPOCHS", "2")
    monkeypatch.setenv("KTSTREAM_KAFKA__GROUP_ID", "from-env")
    s = section(path, "trainer", TrainerSettings)
    assert (s.archive, s.registry, s.finetune) == ("/a", "/mnt/registry", {"epochs": 2, "lr": 0.01})
    assert section(path, "kafka", KafkaSettings).group_id == "from-env"
    monkeypatch.setenv("KTSTREAM_TRAINER__HORIZON_DAYS", "-1")
    with pytest.raises(ConfigError, match="KTSTREAM_TRAINER__"):
        section(path, "trainer", TrainerSettings)


def test_records_the_columns_cannot_hold_are_set_aside_not_failing_the_file(tmp_path):
    """The writer checks each row on ``add``: a record beyond the int64 columns (or with attributes that are not
    JSON) is refused with the reason, and the others of its file are written."""
    recs = events(2)[:6]
    writer = ArchiveWriter(tmp_path)
    problems = [writer.add(("events", 0), i, r) for i, r in enumerate(recs)]
    problems.append(writer.add(("events", 0), 6, {**recs[0], "event_id": "big", "seq": 2**63}))
    problems.append(writer.add(("events", 0), 7, {**recs[0], "event_id": "obj", "attributes": {"x": object()}}))
    assert problems[:6] == [None] * 6 and "int64" in problems[6] and "not JSON" in problems[7]
    assert writer.flush() == {("events", 0): 8}
    assert read_archive(tmp_path) == canonical_order(recs) and writer.skipped == 2


def test_the_archivers_dead_letters_go_out_before_its_commit(tmp_path):
    """A dead letter that cannot be sent stops the flush before any file or commit: nothing is lost."""
    from ktstream.engine.exceptions import SinkError

    class Down(MemorySink):
        def flush(self, timeout_s):
            raise SinkError("broker gone")

    recs = events(2)
    source = MemorySource(as_records(recs, partitions=1) + [Record("events", 0, len(recs), None, b"{}")])
    archiver = Archiver(source, ArchiveWriter(tmp_path), Down())
    archiver.step(0.0, 10_000)
    with pytest.raises(SinkError):
        archiver.flush()
    assert source.committed == {} and read_archive(tmp_path) == []
    archiver.dead_letters = MemorySink()
    archiver.flush()
    assert source.committed == {("events", 0): len(recs) + 1} and len(archiver.dead_letters.flushed) == 1
