"""A hostile corpus through the engine and the archiver on the embedded broker: no crash, every offset accounted.

Generates ``--events`` records (tests/support/hostile.py: valid traffic mixed with every hostile case),
publishes them to an events topic of an embedded broker (Tansu) on partition crc32(key) % P (keyless:
0), then runs, each in its own process, the engine (``build_engine`` with the default settings and a
randomly initialised DKT: the ``ktstream serve`` wiring) and the archiver (``kafka_archiver``, its own
consumer group) until they have committed every input offset. Then it reads the predictions and both
dead-letter topics back and checks: each process exited 0; every input offset is exactly one
prediction or one engine dead letter, of the expected kind; every offset is one archived row or one
archiver dead letter, of the expected kind; all offsets committed. Prints each process's peak RSS.

    python bench/hostile_corpus.py --events 2000
    python bench/hostile_corpus.py --events 100000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.hostile import accounting, as_records, hostile_corpus  # noqa: E402

EVENTS, PREDICTIONS = "hostile.events", "hostile.predictions"
DEAD, ARCHIVE_DEAD = "hostile.dead", "hostile.archive-dead"


@dataclass(frozen=True)
class Placed:
    """An output for one partition (KafkaSink sends to ``partition`` when an output has one)."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int
    headers: tuple = ()


def settings_for(bootstrap: str, partitions: int, group: str):
    from ktstream.config import load_settings

    return load_settings(None, kafka={"bootstrap_servers": bootstrap, "group_id": group, "session_timeout_ms": 6000,
                                      "partitions": partitions, "topics": {"events": EVENTS, "predictions": PREDICTIONS,
                                                                           "dead_letters": DEAD}})


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_engine(bootstrap: str, partitions: int, ends: dict[int, int], timeout_s: float) -> dict:
    """The engine as ``ktstream serve`` wires it, until every partition's offsets are committed."""
    import torch

    from connectors.kafka import KafkaSink, KafkaSource
    from ktstream.data.vocab import Vocabulary
    from ktstream.models import create
    from ktstream.models.checkpoint import ServingModel
    from ktstream.service import build_engine, tune_process
    from tests.support.hostile import CONCEPTS, ITEMS

    s = settings_for(bootstrap, partitions, "hostile-engine")
    torch.manual_seed(0)
    torch.set_num_threads(s.engine.torch_threads)
    items, concepts = Vocabulary.build(ITEMS), Vocabulary.build(CONCEPTS)
    serving = ServingModel(create("dkt", n_items=len(items), n_concepts=len(concepts)).eval(), items, concepts, "v0")
    source = KafkaSource(s.kafka, max_poll_records=s.engine.max_batch)
    engine = build_engine(s, serving, source, KafkaSink(s.kafka))
    tune_process(s.engine)
    done: dict[int, int] = {}
    start = first = time.monotonic()
    deadline = start + timeout_s
    if engine.collector is not None:
        engine.collector.start()
    try:
        while any(done.get(p, 0) < end for p, end in ends.items()) and time.monotonic() < deadline:
            batch = engine.step()
            if batch is not None:
                if not done:
                    first = time.monotonic()
                for (_, p), off in batch.offsets.items():
                    done[p] = max(done.get(p, 0), off)
    finally:
        if engine.collector is not None:
            engine.collector.stop()
    seconds = time.monotonic() - first
    committed = {p: source.committed((EVENTS, p)) or 0 for p in ends}
    metrics = engine.metrics.dead_letters()
    engine.close()
    return {"committed": committed, "seconds": round(seconds, 1), "dead_letters": metrics,
            "peak_rss_mb": round(peak_rss_mb(), 1)}


def run_archiver(bootstrap: str, partitions: int, ends: dict[int, int], folder: str, timeout_s: float) -> dict:
    """The archiver as ``ktstream archive`` builds it, until every input offset is committed."""
    from connectors.archive import ArchiveSettings, kafka_archiver

    s = settings_for(bootstrap, partitions, "hostile-archive")
    cfg = ArchiveSettings(folder=folder, group_id="hostile-archive", dead_letter_topic=ARCHIVE_DEAD,
                          flush_records=10_000, flush_seconds=5.0, poll_timeout_s=0.2)
    archiver = kafka_archiver(s.kafka, cfg)
    total, polled = sum(ends.values()), 0
    start = first = time.monotonic()
    deadline = start + timeout_s
    try:
        while polled < total and time.monotonic() < deadline:
            n = archiver.step(cfg.poll_timeout_s, cfg.max_poll_records)
            if n and not polled:
                first = time.monotonic()
            polled += n
        archiver.flush()
        seconds = time.monotonic() - first
        committed = {p: archiver.source.committed((EVENTS, p)) or 0 for p in ends}
    finally:
        archiver.source.close()
        archiver.dead_letters.close()
    return {"committed": committed, "seconds": round(seconds, 1), "written": archiver.writer.written,
            "dead_letters": dict(archiver.dead_lettered), "peak_rss_mb": round(peak_rss_mb(), 1)}


def child(role: str, args: argparse.Namespace, ends: dict[int, int], folder: str) -> dict:
    """Run ``role`` in its own process; its last stdout line is its JSON report."""
    cmd = [sys.executable, __file__, "--role", role, "--bootstrap", args.bootstrap, "--partitions",
           str(args.partitions), "--ends", json.dumps(ends), "--folder", folder, "--timeout", str(args.timeout)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 120)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return {"exit_code": proc.returncode}
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["committed"] = {int(p): n for p, n in report["committed"].items()}  # JSON keys are text
    return {"exit_code": 0, **report}


def read_topic(settings, topic: str, partitions: int) -> list[bytes]:
    from connectors.kafka.committed import read_partition

    return [r.value for p in range(partitions) for r in read_partition(settings, topic, p)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=1200.0, help="longest run of each process, seconds")
    ap.add_argument("--role", choices=["engine", "archiver"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--ends", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role is not None:
        ends = {int(p): n for p, n in json.loads(args.ends).items()}
        run = run_engine(args.bootstrap, args.partitions, ends, args.timeout) if args.role == "engine" else \
            run_archiver(args.bootstrap, args.partitions, ends, args.folder, args.timeout)
        print(json.dumps(run))
        return 0

    from connectors.broker import EmbeddedBroker
    from connectors.kafka import KafkaSink
    from ktstream.data.archive_reader import archive_files
    from ktstream.data.eventlog import iter_parquet

    t0 = time.monotonic()
    corpus = hostile_corpus(args.events, args.seed)
    records = as_records(corpus, EVENTS, args.partitions)
    ends = dict(Counter(r.partition for r in records))
    cases = Counter(e.case for *_, e in corpus)
    print(f"corpus: {len(corpus)} records, {sum(len(v or b'') for _, v, _ in corpus) / 1e6:.1f} MB, "
          f"{len(cases) - 1} hostile cases, {cases['valid']} valid ({time.monotonic() - t0:.0f} s to generate)")
    folder = tempfile.mkdtemp(prefix="hostile-archive-")
    with EmbeddedBroker() as broker:
        args.bootstrap = broker.bootstrap_servers
        s = settings_for(broker.bootstrap_servers, args.partitions, "hostile-check")
        broker.create_topics([EVENTS, PREDICTIONS, DEAD, ARCHIVE_DEAD], args.partitions)
        sink = KafkaSink(s.kafka)
        t0 = time.monotonic()
        for i in range(0, len(records), 5000):
            sink.send(Placed(EVENTS, r.key, r.value, r.partition) for r in records[i:i + 5000])
            sink.flush(120)
        sink.close()
        print(f"published in {time.monotonic() - t0:.0f} s to {args.partitions} partitions")
        engine = child("engine", args, ends, folder)
        print("engine:", json.dumps(engine))
        archiver = child("archiver", args, ends, folder)
        print("archiver:", json.dumps(archiver))
        engine_out = read_topic(s.kafka, PREDICTIONS, args.partitions) + read_topic(s.kafka, DEAD, args.partitions)
        archive_dead = read_topic(s.kafka, ARCHIVE_DEAD, args.partitions)
    expected_engine = {(r.topic, r.partition, r.offset): e.engine for r, (*_, e) in zip(records, corpus)}
    expected_dead = {(r.topic, r.partition, r.offset): e.archive for r, (*_, e) in zip(records, corpus)
                     if e.archive != "archived"}
    archived = Counter((row["learner_id"], row["event_id"]) for path in archive_files(folder)
                       for row in iter_parquet(path))
    wanted = Counter((json.loads(v)["learner_id"], json.loads(v)["event_id"]) for _, v, e in corpus
                     if e.archive == "archived")
    problems = {
        "engine crashed": [] if engine.get("exit_code") == 0 else [engine],
        "archiver crashed": [] if archiver.get("exit_code") == 0 else [archiver],
        "engine offsets": accounting(expected_engine, engine_out),
        "engine commits": [] if engine.get("committed") == ends else [f"{engine.get('committed')} != {ends}"],
        "archiver dead letters": accounting(expected_dead, archive_dead),
        "archived rows": [] if archived == wanted else
        [f"{sum((archived - wanted).values())} extra, {sum((wanted - archived).values())} missing rows"],
        "archiver commits": [] if archiver.get("committed") == ends else [f"{archiver.get('committed')} != {ends}"],
    }
    print(f"engine: {len(engine_out)} outputs for {len(records)} input offsets, "
          f"{sum(e.engine == 'prediction' for *_, e in corpus)} predictions expected; "
          f"peak RSS {engine.get('peak_rss_mb')} MB, {engine.get('seconds')} s")
    print(f"archiver: {sum(archived.values())} rows + {len(archive_dead)} dead letters for {len(records)} input "
          f"offsets; peak RSS {archiver.get('peak_rss_mb')} MB, {archiver.get('seconds')} s")
    failed = {k: v[:5] for k, v in problems.items() if v}
    print("OK: 0 crashes, every input offset accounted for" if not failed else f"FAILED: {json.dumps(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
