"""A crash-recovery harness: the stateful engine as a subprocess, killed with SIGKILL at random moments.

A test harness, not part of the installed package: used by
tests/state/test_crash_recovery.py (small) and bench/crash_recovery.py
(the issue's figure). ``run`` publishes a simulated stream at a steady pace,
starts ``ktstream serve`` with ``state.dir`` set (at-least-once, or exactly-once
with ``guarantee="exactly-once"``; on the Kafka client ``client``, kafka.client),
kills it (by its own pid) at random moments while the stream flows, restarts it on the same state directory, and finally
stops it cleanly once every input offset has a prediction. ``check`` compares
the outcome with an uninterrupted in-process run of the same model on the same
records: every (partition, offset) predicted, nothing else, repeats only of the
same offset with the same probabilities (none at all in exactly-once), and
every learner's stored state equal (1e-6). Predictions are read as a
read_committed consumer should (connectors.kafka.committed: aborted
transactions dropped even though Tansu does not report them); ``plain_reader``
counts what a stock kafka-python read_committed consumer sees on this broker.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from kafka import KafkaConsumer, TopicPartition

from connectors.kafka import KafkaSink
from connectors.kafka.committed import read_partition
from ktstream.config import KafkaSettings, load_settings
from ktstream.core import Output
from ktstream.data.histories import build_vocabularies
from ktstream.data.simulate import simulate
from ktstream.engine import MemorySink, MemorySource, StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.engine.replay import replay_order
from ktstream.models import create, family
from ktstream.models.checkpoint import ServingModel
from ktstream.serving.runner import ModelRunner
from ktstream.state.sqlite import SqliteStore


def prepare(workdir: Path, bootstrap: str, n_learners: int, mean_length: int, partitions: int, seed: int = 0,
            guarantee: str = "at-least-once", max_batch: int = 100, client: str = "kafka-python"):
    recs = replay_order(simulate(n_learners=n_learners, mean_length=mean_length, seed=seed, step_prob=0.3,
                                 query_prob=0.05, start_spread_ms=60_000, n_items=50, n_concepts=8))
    items, concepts = build_vocabularies(recs)
    torch.manual_seed(seed)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), n_categories=2,
                   **family("dkt").tiny_config).eval()
    serving = ServingModel(model, items, concepts, "chaos-v1")
    serving.save(workdir / "model")
    tag = workdir.name
    cfg = {"kafka": {"client": client, "bootstrap_servers": bootstrap, "group_id": f"g-{tag}",
                     "session_timeout_ms": 6000,
                     "partitions": partitions, "topics": {"events": f"{tag}.ev", "predictions": f"{tag}.pred",
                                                          "dead_letters": f"{tag}.dead"}},
           "metrics": {"port": 0}, "engine": {"max_batch": max_batch, "poll_timeout_ms": 20, "describe": False, "gc_tuning": False},
           "model": {"family": "dkt", "checkpoint": str(workdir / "model")},
           "state": {"processing_guarantee": guarantee}}
    (workdir / "config.yaml").write_text(json.dumps(cfg))
    return recs, serving, load_settings(workdir / "config.yaml")


def feed(settings, recs, seconds: float) -> threading.Thread:
    """Publish ``recs`` (keyed by learner) evenly over ``seconds`` on a background thread."""
    def target():
        sink, chunk = KafkaSink(settings.kafka), max(1, len(recs) // max(1, int(seconds * 10)))
        for i in range(0, len(recs), chunk):
            sink.send([Output(settings.kafka.topics.events, r["learner_id"].encode(), json.dumps(r).encode())
                       for r in recs[i:i + chunk]])
            sink.flush(30)
            time.sleep(0.1)
        sink.close()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def start(workdir: Path, state_dir: Path, log_name: str) -> subprocess.Popen:
    """``ktstream serve`` on ``state_dir`` (given through the environment, as a deployment would); the
    directory's name is the instance id, so a restart reuses its transactional.id and fences its dead self."""
    log = open(workdir / log_name, "ab")
    env = os.environ | {"KTSTREAM_STATE__DIR": str(state_dir), "KTSTREAM_STATE__INSTANCE_ID": state_dir.name}
    return subprocess.Popen([sys.executable, "-c", "from ktstream.cli.main import main; raise SystemExit(main())",
                             "serve", "--config", str(workdir / "config.yaml")], stdout=log,
                            stderr=subprocess.STDOUT, env=env)


def _settle(kafka, events: str, partitions: int, deadline: float) -> tuple[list, list[dict]]:
    """The input records, and the predictions once they cover every input offset (or at the deadline)."""
    records = read_topic(kafka, events, partitions)
    want = {(r.partition, r.offset) for r in records}
    got: list[dict] = []
    while time.monotonic() < deadline:
        started = time.monotonic()
        got = predictions(kafka, partitions)
        if {(p["source"]["partition"], p["source"]["offset"]) for p in got} >= want:
            break
        time.sleep(max(2.0, time.monotonic() - started))  # reading at most half the time: the engine needs the CPU
    return records, got


def _restores(workdir: Path, log_name: str = "engine.log") -> int:
    """Assignments the engine processes have logged so far (one line per restored partition)."""
    path = workdir / log_name
    return path.read_bytes().count(b"changelog records in") if path.exists() else 0


def read_topic(k: KafkaSettings, topic: str, partitions: int):
    return [r for p in range(partitions) for r in read_partition(k, topic, p, idle_polls=3)]


def plain_reader(k: KafkaSettings, partitions: int) -> int:
    """Predictions a stock kafka-python read_committed consumer receives (Tansu: aborted ones too)."""
    consumer = KafkaConsumer(bootstrap_servers=k.bootstrap_servers, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    tps = [TopicPartition(k.topics.predictions, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    n, idle = 0, 0
    while idle < 5:
        got = sum(len(v) for v in consumer.poll(timeout_ms=300, max_records=5000).values())
        n, idle = n + got, 0 if got else idle + 1
    consumer.close(autocommit=False)
    return n


def predictions(k: KafkaSettings, partitions: int) -> list[dict]:
    return [json.loads(r.value) for r in read_topic(k, k.topics.predictions, partitions)]


def reference(serving: ServingModel, records, settings):
    """The uninterrupted run: predictions by (partition, offset) and the final learner states."""
    src, sink = MemorySource(sorted(records, key=lambda r: (r.partition, r.offset))), MemorySink()
    proc = Processor(ModelRunner(serving.model, serving.items, serving.concepts, serving.version, False),
                     StateCache(1 << 40), "pred", "dead")
    engine = Engine(src, sink, proc, max_batch=100)
    while src.pending:
        engine.step()
    preds = {(p["source"]["partition"], p["source"]["offset"]): p["probs"]
             for p in (json.loads(o.value) for o in sink.flushed if o.topic == "pred")}
    return preds, {lid: proc.cache.get(lid) for lid in list(proc.cache.keys())}


def run(workdir: Path, bootstrap: str, n_learners=200, mean_length=15, partitions=3, kills=3, feed_s=20.0,
        seed=0, timeout_s=240.0, guarantee: str = "at-least-once", pause=(0.2, 3.0), max_batch: int = 100,
        client: str = "kafka-python") -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    recs, serving, s = prepare(workdir, bootstrap, n_learners, mean_length, partitions, seed, guarantee, max_batch,
                               client)
    from connectors.kafka.admin import create_topics
    t = s.kafka.topics
    create_topics(s.kafka, [t.events, t.predictions, t.dead_letters], partitions)
    rng = random.Random(seed)
    feeder = feed(s, recs, feed_s)
    proc, killed = start(workdir, workdir / "state", "engine.log"), 0
    deadline = time.monotonic() + timeout_s
    try:
        while killed < kills and time.monotonic() < deadline:
            joined = _restores(workdir) + 1  # kill only a process that owns partitions and is processing
            while _restores(workdir) < joined and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
            time.sleep(rng.uniform(*pause))
            proc.kill()  # SIGKILL, this process only
            proc.wait(30)
            killed += 1
            proc = start(workdir, workdir / "state", "engine.log")
        feeder.join(max(1.0, deadline - time.monotonic()))
        records, got = _settle(s.kafka, t.events, partitions, deadline)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return {"records": records, "predictions": got, "serving": serving, "settings": s, "kills": killed,
            "events": len(recs), "state_dir": workdir / "state", "partitions": partitions,
            "exactly_once": guarantee == "exactly-once"}


def check(result: dict, atol: float = 1e-6) -> dict:
    """The three properties; raises AssertionError with the first violation, returns counts."""
    records, got = result["records"], result["predictions"]
    assert len(records) == result["events"], f"{len(records)} input records for {result['events']} events"
    ref_preds, ref_states = reference(result["serving"], records, result["settings"])
    want = {(r.partition, r.offset) for r in records}
    seen = [(p["source"]["partition"], p["source"]["offset"]) for p in got]
    assert set(seen) == want, f"missing {len(want - set(seen))}, unexpected {len(set(seen) - want)} offsets"
    if result.get("exactly_once"):
        assert len(seen) == len(want), f"exactly-once: {len(seen) - len(want)} repeated predictions"
    for p, key in zip(got, seen):  # repeats are only same-offset repeats, with the same values
        assert torch.allclose(torch.tensor(p["probs"]), torch.tensor(ref_preds[key]), atol=atol), key
    dirs = result["state_dir"] if isinstance(result["state_dir"], list) else [result["state_dir"]]
    stores = [SqliteStore(d) for d in dirs]
    for store in stores:
        for part in range(result["partitions"]):
            store.open((result["settings"].kafka.topics.events, part))
    for lid, ref in ref_states.items():  # with several instances, the most advanced copy is the owner's
        st = max((x for x in (store.load(lid) for store in stores) if x is not None),
                 key=lambda x: x.last_offset, default=None)
        assert st is not None, f"learner {lid} missing from the store"
        assert (st.last_offset, st.events, st.responses) == (ref.last_offset, ref.events, ref.responses), lid
        for k, v in ref.state.items():
            assert torch.allclose(st.state[k], v, atol=atol), (lid, k)
    for store in stores:
        store.close()
    return {"events": len(records), "predictions": len(got), "duplicates": len(got) - len(want),
            "learners": len(ref_states), "kills": result["kills"]}


def _wait(cond, deadline: float) -> None:
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.2)


def run_group(workdir: Path, bootstrap: str, n_learners=200, mean_length=15, partitions=4, feed_s=40.0,
              seed=0, timeout_s=240.0, client: str = "kafka-python") -> dict:
    """Two instances in one group: A and B; A killed (B takes its partitions); A back on its old
    directory (its stale store catches up from the changelog); both stopped once all is predicted."""
    workdir.mkdir(parents=True, exist_ok=True)
    recs, serving, s = prepare(workdir, bootstrap, n_learners, mean_length, partitions, seed, client=client)
    from connectors.kafka.admin import create_topics
    t = s.kafka.topics
    create_topics(s.kafka, [t.events, t.predictions, t.dead_letters], partitions)
    deadline = time.monotonic() + timeout_s
    feeder = feed(s, recs, feed_s)
    a = start(workdir, workdir / "state-a", "a.log")
    b = start(workdir, workdir / "state-b", "b.log")
    try:
        _wait(lambda: _restores(workdir, "a.log") > 0 and _restores(workdir, "b.log") > 0, deadline)
        time.sleep(2.0)
        before = _restores(workdir, "b.log")
        a.kill()  # SIGKILL: B must take over A's partitions and restore them
        a.wait(30)
        _wait(lambda: _restores(workdir, "b.log") > before, deadline)
        time.sleep(2.0)
        a = start(workdir, workdir / "state-a", "a.log")  # scale 1 -> 2 again
        feeder.join(max(1.0, deadline - time.monotonic()))
        records, got = _settle(s.kafka, t.events, partitions, deadline)
    finally:
        for proc in (a, b):
            proc.terminate()
        for proc in (a, b):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    return {"records": records, "predictions": got, "serving": serving, "settings": s, "kills": 1,
            "events": len(recs), "state_dir": [workdir / "state-a", workdir / "state-b"], "partitions": partitions}
