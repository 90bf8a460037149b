"""Kafka source and sink against the real embedded broker (no mocks), on each client (kafka.client)."""

from __future__ import annotations

import threading
import uuid

import pytest

from connectors.kafka import output_sink_for, sink_for, source_for
from connectors.kafka.clients import consumer_config, producer_config
from connectors.kafka.committed import read_partition
from ktstream.config import KafkaSettings, load_settings
from ktstream.core import Output
from ktstream.engine.exceptions import SinkError


def publish(settings, topic, n, learners=10):
    sink = output_sink_for(settings)
    sink.send(Output(topic, f"u{i % learners}".encode(), f"{i}".encode()) for i in range(n))
    sink.flush(30)
    sink.close()


def consume(source, n, wait, timeout_s=30.0, max_records=1000):
    got = []
    wait(lambda: len(got) >= n, timeout_s, step=lambda: got.extend(source.poll(0.2, max_records)),
         message=f"{n} records")
    return got


@pytest.mark.broker
def test_keyed_records_keep_per_key_order_on_one_partition(kafka_settings, topic, wait):
    s, t = kafka_settings(), topic(4)
    publish(s, t, 200)
    src = source_for(s, topics=[t])
    recs = consume(src, 200, wait)
    src.close()
    assert len(recs) == 200 and all(r.topic == t and r.timestamp_ms for r in recs)
    by_key = {}
    for r in recs:
        by_key.setdefault(r.key, []).append(r)
    for key, rs in by_key.items():
        assert len({r.partition for r in rs}) == 1, f"{key} spread over partitions"
        assert [int(r.value) for r in rs] == sorted(int(r.value) for r in rs), f"{key} out of order"
    assert len({r.partition for r in recs}) > 1


@pytest.mark.broker
def test_commit_then_resume_and_lag_from_highwater(kafka_settings, topic, wait):
    s, t = kafka_settings(), topic(1)
    publish(s, t, 50)
    first = source_for(s, topics=[t])
    recs = consume(first, 10, wait, max_records=10)
    assert [r.offset for r in recs] == list(range(10))
    wait(lambda: (t, 0) in first.lag(), 10, step=lambda: None, message="lag")
    assert first.lag() == {(t, 0): 40}, "lag = high-watermark (50) - next offset (10)"
    first.commit({(t, 0): 10})
    assert first.committed((t, 0)) == 10
    first.close()
    second = source_for(s, topics=[t])
    recs = consume(second, 40, wait)
    second.close()
    assert recs[0].offset == 10 and recs[-1].offset == 49


@pytest.mark.broker
@pytest.mark.slow  # Tansu needs several 3 s join rounds for a two-member rebalance (10-50 s)
def test_rebalance_callbacks_reach_plain_callables(kafka_settings, topic, wait):
    """Two members, each polling on its own thread like an engine instance."""
    s, t = kafka_settings(), topic(4)
    events = {"a": [], "b": []}
    a, b = source_for(s, topics=[t]), source_for(s, topics=[t])
    for name, src in (("a", a), ("b", b)):
        src.on_assigned = lambda ps, n=name: events[n].append(("assigned", ps, threading.get_ident()))
        src.on_revoked = lambda ps, n=name: events[n].append(("revoked", ps, threading.get_ident()))
    stop = threading.Event()
    pollers = {}

    def loop(src, name):
        pollers[name] = threading.get_ident()
        while not stop.is_set():
            src.poll(0.05, 10)

    threads = [threading.Thread(target=loop, args=(a, "a"))]
    threads[0].start()
    try:
        wait(lambda: len(a.assignment()) == 4, 30, message="first member's assignment")
        threads.append(threading.Thread(target=loop, args=(b, "b")))
        threads[1].start()
        wait(lambda: b.assignment() and len(a.assignment()) + len(b.assignment()) == 4, 90,
             message="cooperative rebalance onto the second member")
    finally:
        stop.set()
        for th in threads:
            th.join(10)
    assert a.assignment().isdisjoint(b.assignment())
    for name, src in (("a", a), ("b", b)):  # the callbacks tell the engine exactly what it owns
        owned = set()
        for kind, ps, _ in events[name]:
            owned = owned | set(ps) if kind == "assigned" else owned - set(ps)
        assert owned == src.assignment(), f"member {name}: callbacks {events[name]} vs {src.assignment()}"
    revoked = {p for kind, ps, _ in events["a"] if kind == "revoked" for p in ps}
    assert b.assignment() <= revoked, "partitions that moved were revoked from the first member first"
    assert all(tid == pollers[n] for n in "ab" for _, _, tid in events[n]), "callbacks run on the polling thread"
    a.close()
    b.close()


@pytest.mark.broker
def test_sink_failure_raises(kafka_settings, topic, client):
    too_small = {"kafka-python": {"max_request_size": 1024}, "confluent": {"message.max.bytes": 1000}}[client]
    sink = output_sink_for(kafka_settings(), **too_small)
    with pytest.raises(SinkError):
        sink.send([Output(topic(1), b"u", b"x" * 10_000)])
        sink.flush(10)
    sink.close()


@pytest.mark.broker
@pytest.mark.parametrize("track_acked", [True, False])
def test_acked_offsets_are_tracked_only_when_asked_and_flush_waits_either_way(kafka_settings, topic, track_acked):
    """``acked`` is durable state's changelog checkpoint; a sink made without a reader for it keeps none
    (librdkafka then reports failed deliveries only), and its flush still returns only once the broker
    holds every record: a read to the end offsets taken right after it finds them all."""
    s, t = kafka_settings(), topic(2)
    sink = output_sink_for(s, track_acked)
    sink.send(Output(t, f"u{i}".encode(), f"{i}".encode(), partition=i % 2) for i in range(10))
    sink.flush(30)
    assert sink.acked == ({(t, 0): 5, (t, 1): 5} if track_acked else {})
    for p in (0, 1):
        assert [int(r.value) for r in read_partition(s, t, p, timeout_s=30)] == list(range(p, 10, 2))
    sink.close()


@pytest.mark.broker
@pytest.mark.parametrize("track_acked", [True, False])
def test_confluent_delivery_failure_fails_the_flush_with_or_without_success_reports(broker, track_acked):
    """A record that fails after ``produce`` accepted it (here: its topic never appears, so it times out
    waiting) reaches the flush as a SinkError in both delivery-report modes."""
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed: the confluent path is not tested")
    s = KafkaSettings(bootstrap_servers=broker.bootstrap_servers, client="confluent", client_id="test")
    sink = output_sink_for(s, track_acked, **{"message.timeout.ms": 500})
    sink.send([Output(f"missing-{uuid.uuid4().hex[:8]}", b"u", b"x")])
    with pytest.raises(SinkError, match="not acknowledged"):
        sink.flush(10)
    sink.close()


def test_durable_state_refuses_a_sink_that_does_not_track_acked(tmp_path):
    """The store records the changelog checkpoint from ``acked``: a sink that keeps none would lose it."""
    from ktstream.state.manager import StateManager
    from ktstream.state.sqlite import SqliteStore

    sink = output_sink_for(KafkaSettings(), track_acked=False)
    with pytest.raises(ValueError, match="track_acked"):
        StateManager(SqliteStore(str(tmp_path)), "cl", sink, lambda tp, start: [], lambda tp: None)
    assert sink_for(load_settings(None, state=dict(dir=str(tmp_path)))).track_acked
    assert not sink_for(load_settings(None)).track_acked


def test_client_settings_pass_security_and_extras_through():
    s = KafkaSettings(bootstrap_servers="a:1,b:2", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                      sasl_username="svc", sasl_password="pw", ssl_cafile="/ca.pem",
                      consumer={"fetch_min_bytes": 10}, producer={"compression_type": "gzip"})
    c, p = consumer_config(s), producer_config(s)
    assert c["bootstrap_servers"] == ["a:1", "b:2"] and c["sasl_plain_password"] == "pw"
    assert c["ssl_cafile"] == "/ca.pem" and c["fetch_min_bytes"] == 10 and not c["enable_auto_commit"]
    assert p["acks"] == "all" and p["enable_idempotence"] and p["compression_type"] == "gzip"
    assert p["sasl_mechanism"] == "SCRAM-SHA-512" and "group_id" not in p


def test_confluent_settings_pass_security_and_extras_through():
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (the kafka-native extra)")
    from connectors.kafka.confluent_clients import consumer_config as c_config, producer_config as p_config

    s = KafkaSettings(bootstrap_servers="a:1,b:2", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                      sasl_username="svc", sasl_password="pw", ssl_cafile="/ca.pem", ssl_certfile="/c.pem",
                      ssl_keyfile="/k.pem", client="confluent", consumer={"fetch.min.bytes": 10},
                      producer={"compression.type": "gzip"})
    c, p = c_config(s), p_config(s)
    assert c["bootstrap.servers"] == "a:1,b:2" and c["sasl.password"] == "pw" and c["sasl.username"] == "svc"
    assert c["security.protocol"] == "sasl_ssl" and c["ssl.ca.location"] == "/ca.pem"
    assert c["ssl.certificate.location"] == "/c.pem" and c["ssl.key.location"] == "/k.pem"
    assert c["fetch.min.bytes"] == 10 and not c["enable.auto.commit"] and not c["enable.auto.offset.store"]
    assert c["isolation.level"] == "read_committed" and c["partition.assignment.strategy"] == "cooperative-sticky"
    assert p["acks"] == "all" and p["enable.idempotence"] and p["compression.type"] == "gzip"
    assert p["sasl.mechanism"] == "SCRAM-SHA-512" and "group.id" not in p


def test_confluent_client_without_the_extra_is_a_one_line_config_error(monkeypatch):
    import builtins

    from connectors.kafka.confluent_clients import MISSING
    from ktstream.exceptions import ConfigError

    real = builtins.__import__

    def no_confluent(name, *args, **kwargs):
        if name == "confluent_kafka":
            raise ImportError("No module named 'confluent_kafka'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_confluent)
    with pytest.raises(ConfigError) as err:
        source_for(KafkaSettings(client="confluent"))
    assert str(err.value) == MISSING and "\n" not in MISSING and "kafka-native" in MISSING
    with pytest.raises(ConfigError):
        output_sink_for(KafkaSettings(client="confluent"))
