"""Fault: slow and stalling broker during restore (a loopback delaying proxy in front of Tansu).

Instance A processes the first half of the events and stops. Instance B, on an
empty state directory, must restore every learner from the changelog while
the broker answers 1.5 s late and, at first, not at all (a stall longer than
the read's stall timeout, so the first attempt fails and is retried). Then it
serves the second half. Every input offset must have one prediction or dead
letter, repeats only of the same values, and B's stored states must equal an
uninterrupted run's.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from connectors.kafka import KafkaSink, KafkaSource, sink_for
from connectors.kafka.admin import create_topics
from connectors.kafka.committed import read_partition
from tests.support.state_chaos import reference
from ktstream.cli.serve import create_changelog
from ktstream.config import load_settings
from ktstream.core import Output, Record
from ktstream.models.checkpoint import ServingModel
from ktstream.service import build_engine
from ktstream.state import SqliteStore
from tests.support.accounting import account
from tests.support.delay_proxy import ProxiedBroker
from tests.state.test_store_engine import setup

pytestmark = [pytest.mark.broker, pytest.mark.slow]
PARTS = 2


@pytest.fixture(scope="module")
def broker():
    with ProxiedBroker() as b:
        yield b


def publish(k, recs) -> None:
    sink = KafkaSink(k)
    sink.send(Output(k.topics.events, r["learner_id"].encode(), json.dumps(r).encode()) for r in recs)
    sink.flush(30)
    sink.close()


def run_until(engine, done, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the engine did not get there in time"
        engine.step()


def test_slow_and_stalling_broker_during_restore(broker, tmp_path):
    model, items, concepts, records, reference_probs = setup(n_learners=40)
    serving = ServingModel(model, items, concepts, "v0")
    tag = f"slow-{uuid.uuid4().hex[:6]}"

    def settings(state_dir):
        return load_settings(None, kafka={"bootstrap_servers": broker.bootstrap_servers, "group_id": tag,
                                          "session_timeout_ms": 6000, "partitions": PARTS,
                                          "read_stall_timeout_s": 4.0,
                                          "topics": {"events": f"{tag}.ev", "predictions": f"{tag}.pred",
                                                     "dead_letters": f"{tag}.dead"}},
                             engine={"max_batch": 50, "poll_timeout_ms": 50, "describe": False},
                             state={"dir": str(state_dir), "restore_attempts": 4, "restore_backoff_s": 0.5})

    s = settings(tmp_path / "a")
    k = s.kafka
    create_topics(k, [k.topics.events, k.topics.predictions, k.topics.dead_letters], PARTS)
    changelog = create_changelog(s)
    recs = [json.loads(r.value) for r in records]
    half = len(recs) // 2
    publish(k, recs[:half])
    tps = [(k.topics.events, p) for p in range(PARTS)]

    a = build_engine(s, serving, KafkaSource(k, max_poll_records=50), sink_for(s))
    joined = a.state.assigned  # committed() only once joined: asking earlier keeps the join looping
    run_until(a, lambda: len(joined) == PARTS and sum(a.source.committed(tp) or 0 for tp in tps) >= half, 90)
    a.close()
    a.state.close()
    written = sum(len(read_partition(k, changelog, p)) for p in range(PARTS))
    assert written >= 40, written

    publish(k, recs[half:])
    b_settings = settings(tmp_path / "b")  # a new instance: an empty store, everything from the changelog
    source = KafkaSource(k, max_poll_records=50)
    plain_read, reads = source.read_partition, []

    def slow_read(topic, partition, start=0):  # the broker turns slow, and stalls, as the restore begins
        if not reads:
            broker.proxy.set_delay(1.5)
            broker.proxy.stall()
            threading.Timer(6.0, broker.proxy.resume).start()
        reads.append((topic, partition, start))
        return plain_read(topic, partition, start)

    source.read_partition = slow_read
    b = build_engine(b_settings, serving, source, sink_for(b_settings))
    mgr = b.state
    try:
        run_until(b, lambda: len(mgr.assigned) == PARTS, 180)
        broker.proxy.set_delay(0.0)
        run_until(b, lambda: sum(b.source.committed(tp) or 0 for tp in tps) >= len(recs), 120)
        assert b.ready() and mgr.ready, "the engine still serves"
        retries = b.metrics.registry.get_sample_value("ktstream_state_restore_retries_total")
    finally:
        broker.proxy.resume()
        broker.proxy.set_delay(0.0)
        b.close()
        b.state.close()

    events = [Record(r.topic, r.partition, r.offset, r.key, r.value)
              for p in range(PARTS) for r in read_partition(k, k.topics.events, p)]
    outputs = {t: [json.loads(r.value) for p in range(PARTS) for r in read_partition(k, t, p)]
               for t in (k.topics.predictions, k.topics.dead_letters)}
    account(outputs[k.topics.predictions], outputs[k.topics.dead_letters],
            {(r.partition, r.offset) for r in events}, reference_probs)
    _, ref_states = reference(serving, events, s)
    store = SqliteStore(tmp_path / "b")
    for tp in tps:
        store.open(tp)
    for lid, want in ref_states.items():
        got = store.load(lid)
        assert got is not None and (got.last_offset, got.events) == (want.last_offset, want.events), lid
        assert all((got.state[n] - v).abs().max() <= 1e-6 for n, v in want.state.items()), lid
    store.close()
    assert mgr.read_records >= written and mgr.restored_records > 0
    assert retries >= 1 and len(reads) > PARTS, "the stall outlived the read's stall timeout: retried"
