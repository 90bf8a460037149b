"""Fault: oversized outputs. A learner whose changelog record grows past the largest record that may be
sent, through the engine ``ktstream serve`` builds (at-least-once, durable state) and the real KafkaSink
over an in-memory producer that refuses what kafka-python refuses (``MessageSizeTooLargeError`` from
``send``) and publishes the rest at once (as the background sender would, whatever the batch's fate).

The engine must dead-letter that learner's events (``output_too_large``) before sending, keep its last
committed state and move on: every input offset ends as exactly one prediction or one dead letter (repeats
only of the same offset, as at-least-once allows), every state equals the uninterrupted run's, and the
engine still serves. A transient flush failure on the way is rolled back and retried, counted.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter

import kafka.errors
import pytest
import torch
from kafka.record.default_records import DefaultRecordBatchBuilder

import connectors.kafka.sink as sink_module
from connectors.kafka import KafkaSink
from tests.support.state_chaos import reference as uninterrupted
from ktstream.config import KafkaSettings, load_settings
from ktstream.core import Record
from ktstream.engine.exceptions import SinkError
from ktstream.models.checkpoint import ServingModel
from ktstream.service import build_engine
from ktstream.state import MemoryStore
from ktstream.state.changelog import changelog_topic
from tests.state.test_store_engine import PARTS, setup
from tests.support.list_source import ListSource

CL = changelog_topic("ev")


class Broker:
    """Topics, the group's committed offsets, the seeks (rollbacks) and an optional flush fault."""

    def __init__(self, records):
        self.inputs = list(records)
        self.topics: dict[tuple[str, int], list[tuple[Record, int]]] = {}  # (record, rollbacks before it)
        self.committed: dict[tuple[str, int], int] = {}
        self.seeks = 0
        self.fail_flush_at: set[int] = set()  # flush numbers (1-based) that time out
        self.flushes = 0

    def publish(self, topic, partition, key, value):
        log = self.topics.setdefault((topic, partition), [])
        log.append((Record(topic, partition, len(log), key, value), self.seeks))
        return len(log) - 1

    def values(self, topic):
        return [json.loads(r.value) for p in range(PARTS) for r, _ in self.topics.get((topic, p), [])]


class Metadata:
    def __init__(self, topic, partition, offset):
        self.topic, self.partition, self.offset = topic, partition, offset


class Done:
    """A produce future that has its acknowledgement."""

    is_done = True
    exception = None

    def __init__(self, md):
        self.value = md

    def failed(self):
        return False


class Producer:
    """kafka-python's KafkaProducer as KafkaSink uses it; the size check is kafka-python's own."""

    def __init__(self, broker, max_request_size=1_048_576, **_config):
        self.b, self.max_request_size = broker, max_request_size

    def send(self, topic, key=None, value=None, partition=None, headers=None):
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers or [])
        if size > self.max_request_size:
            raise kafka.errors.MessageSizeTooLargeError(f"The message is {size} bytes when serialized which is "
                                                        f"larger than the maximum request size you have configured")
        part = partition if partition is not None else zlib.crc32(key) % PARTS
        return Done(Metadata(topic, part, self.b.publish(topic, part, key, value)))

    def flush(self, timeout=None):
        self.b.flushes += 1
        if self.b.flushes in self.b.fail_flush_at:
            raise kafka.errors.KafkaTimeoutError("Timeout after waiting for 30 secs.")

    def close(self, timeout=None):
        pass


class Source(ListSource):
    """A consumer of the broker's input records: commits, seeks (counted), changelog reads."""

    def __init__(self, broker):
        super().__init__(broker.committed)
        self.b = broker

    def records(self):
        return self.b.inputs

    def partitions(self):
        return [("ev", p) for p in range(PARTS)]

    def seek(self, offsets):
        self.b.seeks += 1
        super().seek(offsets)

    def read_partition(self, topic, partition, start=0, **_options):
        return [r for r, _ in self.b.topics.get((topic, partition), []) if r.offset >= start]


def long_ids_learner(lid, n_events, n_concepts, id_chars, partition, first_offset, start_ms=1_700_000_000_000):
    """``n_events`` events of one learner whose every event names ``n_concepts`` concepts of ``id_chars``."""
    out = []
    for i in range(n_events):
        ev = {"event_id": f"{lid}-{i}", "learner_id": lid, "item_id": f"q{i % 7}",
              "concept_ids": [f"c{j}-".ljust(id_chars, "x") for j in range(n_concepts)],
              "response": (i * 7) % 3 % 2, "event_time": start_ms + 1000 * i}
        out.append(Record("ev", partition, first_offset + i, lid.encode(), json.dumps(ev).encode(), 0))
    return out


def interleave(records, extra):
    """``extra`` spread evenly among ``records``, offsets renumbered in publishing order per partition."""
    out, step = [], max(1, len(records) // max(1, len(extra)))
    extra = list(extra)
    for i, r in enumerate(records):
        out.append(r)
        if i % step == step - 1 and extra:
            out.append(extra.pop(0))
    offsets = Counter()
    renumbered = []
    for r in out + extra:
        renumbered.append(Record(r.topic, r.partition, offsets[r.partition], r.key, r.value, r.timestamp_ms))
        offsets[r.partition] += 1
    return renumbered


def with_learner(records, lid, n_events, n_concepts, id_chars):
    return interleave(records, long_ids_learner(lid, n_events, n_concepts, id_chars,
                                                zlib.crc32(lid.encode()) % PARTS, 0))


def start(serving, broker, monkeypatch, max_request_size=1_048_576, **engine):
    monkeypatch.setattr(sink_module, "KafkaProducer", lambda **cfg: Producer(broker, **cfg))
    settings = load_settings(None, kafka={"topics": {"events": "ev", "predictions": "pred", "dead_letters": "dead"}},
                             engine={"max_batch": 9, "describe": False, "gc_tuning": False, **engine},
                             state={"dir": None})
    sink = KafkaSink(KafkaSettings(producer={"max_request_size": max_request_size}))
    return build_engine(settings, serving, Source(broker), sink, store=MemoryStore())


def pending(broker):
    return any(r.offset >= broker.committed.get(r.tp, 0) for r in broker.inputs)


def drain(engine, broker, steps=400):
    """Step until every input is committed (sink failures are retried, as the run loop does)."""
    for _ in range(steps):
        if not pending(broker):
            return
        try:
            engine.step()
        except SinkError:
            pass
    raise AssertionError(f"the engine stalled: {sum(r.offset >= broker.committed.get(r.tp, 0) for r in broker.inputs)}"
                         f" inputs never committed, {broker.seeks} rollbacks")


def accounting(broker):
    """(source partition, offset) -> {"prediction" | dead-letter reason}; no offset may have both."""
    seen: dict[tuple[int, int], set[str]] = {}
    for p in broker.values("pred"):
        seen.setdefault((p["source"]["partition"], p["source"]["offset"]), set()).add("prediction")
    for d in broker.values("dead"):
        seen.setdefault((d["source"]["partition"], d["source"]["offset"]), set()).add(d["reason"])
    return seen


def assert_each_offset_once(broker):
    seen = accounting(broker)
    assert set(seen) == {(r.partition, r.offset) for r in broker.inputs}, "every input offset accounted for"
    assert all(len(v) == 1 for v in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    return {k: next(iter(v)) for k, v in seen.items()}


def assert_states_equal(engine, expected):
    for lid, ref in expected.items():
        st = engine.cache.get(lid)
        assert st is not None and (st.last_offset, st.events) == (ref.last_offset, ref.events), lid
        assert all(torch.allclose(st.state[k], v, atol=1e-6) for k, v in ref.state.items()), lid


def test_oversized_outputs_are_dead_lettered_before_sending_and_the_engine_moves_on(monkeypatch):
    model, items, concepts, records, reference = setup(n_learners=12)
    serving = ServingModel(model, items, concepts, "v0")
    records = with_learner(records, "wide", n_events=12, n_concepts=16, id_chars=120)
    broker = Broker(records)
    broker.fail_flush_at = {3, 7}  # two transient flush timeouts on the way
    # the producer refuses records over 16 KiB; the engine's own limit (1 MiB by default) yields to it
    engine = start(serving, broker, monkeypatch, max_request_size=16_384, rebuild_window_bytes=1 << 20)
    drain(engine, broker)

    outcome = assert_each_offset_once(broker)
    wide = sorted((r for r in records if r.key == b"wide"), key=lambda r: r.offset)
    wide_outcomes = [outcome[(r.partition, r.offset)] for r in wide]
    accepted = wide_outcomes.index("output_too_large")
    assert 0 < accepted and set(wide_outcomes[accepted:]) == {"output_too_large"}, wide_outcomes
    assert all(outcome[(r.partition, r.offset)] == "prediction" for r in records if r.key != b"wide")
    assert engine.metrics.totals["dead:output_too_large"] == len(wide) - accepted
    assert engine.metrics.registry.get_sample_value("ktstream_batch_retries_total") == 2
    too_large = [d for d in broker.values("dead") if d["reason"] == "output_too_large"]
    assert all("wide" in d["detail"] and "16384-byte limit" in d["detail"] for d in too_large)
    sent = [r.value for p in range(PARTS) for r, _ in broker.topics.get((CL, p), [])]
    assert max(map(len, sent)) < 16_384, "nothing larger than the limit was sent"

    # every state equals the uninterrupted run's: "wide" as of its last accepted event
    kept = [r for r in records if r.key != b"wide"] + wide[:accepted]
    preds, expected = uninterrupted(serving, kept, None)
    assert_states_equal(engine, expected)
    for p in broker.values("pred"):
        assert torch.allclose(torch.tensor(p["probs"]), torch.tensor(preds[(p["source"]["partition"],
                                                                            p["source"]["offset"])]), atol=1e-6)
    by_offset = Counter((p["source"]["partition"], p["source"]["offset"]) for p in broker.values("pred"))
    assert max(by_offset.values()) <= 2 and sum(by_offset.values()) > len(by_offset), \
        "repeats only of the batches whose flush failed (at-least-once)"

    # still serving: a new event of a known learner is predicted and committed
    lid = json.loads(records[0].value)["learner_id"]
    part = records[0].partition
    last = max(json.loads(r.value)["event_time"] for r in records if r.key == lid.encode())
    ev = json.loads(records[0].value) | {"event_id": "after", "event_time": last + 1000}
    broker.inputs.append(Record("ev", part, 1 + max(r.offset for r in records if r.partition == part),
                                lid.encode(), json.dumps(ev).encode(), 0))
    drain(engine, broker)
    assert any(p["event_id"] == "after" for p in broker.values("pred"))


def test_a_dead_letter_over_the_limit_keeps_fewer_original_bytes(monkeypatch):
    model, items, concepts, records, _ = setup(n_learners=3)
    serving = ServingModel(model, items, concepts, "v0")
    part = records[0].partition
    bad = Record("ev", part, 1 + max(r.offset for r in records if r.partition == part), records[0].key,
                 b'{"not json' + b"x" * 30_000, 0)
    broker = Broker(records + [bad])
    engine = start(serving, broker, monkeypatch, max_output_record_bytes=8192)
    drain(engine, broker)
    outcome = assert_each_offset_once(broker)
    assert outcome[(bad.partition, bad.offset)] == "invalid_json"
    (dead,) = broker.values("dead")
    assert "original truncated" in dead["detail"] and 0 < len(dead["original"]) < 8192


def test_a_failed_send_leaves_nothing_pending(monkeypatch):
    """The retried batch's flush waits on, and counts, its own sends only."""
    broker = Broker([])
    monkeypatch.setattr(sink_module, "KafkaProducer", lambda **cfg: Producer(broker, **cfg))
    sink = KafkaSink(KafkaSettings(), max_request_size=4096)
    from ktstream.core import Output

    with pytest.raises(SinkError):
        sink.send([Output("pred", b"a", b"1"), Output("pred", b"a", b"2"), Output("pred", b"a", b"x" * 5000)])
    assert sink._pending == [] and sink.max_record_bytes == 4096
    sink.send([Output("pred", b"a", b"3")])
    sink.flush(1.0)
    assert sink.acked == {("pred", zlib.crc32(b"a") % PARTS): 3}
