"""Fault: unknown commit outcome. Exactly-once, through the engine ``ktstream serve`` builds and the real
TransactionalSink over an in-memory transactional producer and coordinator that behave as kafka-python and
Kafka do: ``commit_transaction`` sends EndTxn; the request times out, so the producer raises (a fatal
KafkaError) whether or not the coordinator received it; a new producer with the same transactional.id
gets through ``init_transactions`` only once the coordinator has finished that transaction: committed if
the commit arrived, aborted if not. A committed transaction cannot be aborted afterwards.

Treating the timeout as an abort and rewinding committed the batch twice. Now, whichever way the broker
went: every input offset has exactly one committed prediction (no repeats at all: read_committed), every
stored and cached state equals the uninterrupted run's, and the engine still serves.
"""

from __future__ import annotations

import json
import zlib

import kafka.errors
import pytest
import torch

import connectors.kafka.sink as sink_module
from connectors.kafka.transactional import TransactionalSink
from tests.support.state_chaos import reference as uninterrupted
from ktstream.config import KafkaSettings, StateSettings, load_settings
from ktstream.core import Record
from ktstream.engine.exceptions import CommitOutcomeUnknownError
from ktstream.models.checkpoint import ServingModel
from ktstream.service import build_engine
from ktstream.state import MemoryStore
from ktstream.state.changelog import changelog_topic
from tests.state.test_store_engine import PARTS, setup
from tests.support.list_source import ListSource

CL = changelog_topic("ev")


class Coordinator:
    """The broker side: logs with transaction numbers, transaction status, the group's committed offsets."""

    def __init__(self, records):
        self.inputs = list(records)
        self.log: dict[tuple[str, int], list[tuple[Record, int]]] = {}
        self.status: dict[int, str] = {}  # open / commit / abort
        self.offsets: dict[int, dict] = {}  # transaction -> input offsets sent to it
        self.committed: dict[tuple[str, int], int] = {}
        self.txn = 0
        self.epoch = 0
        self.commits = 0
        self.fault_at, self.commit_arrives = None, True  # the commit that times out; whether EndTxn got there
        self.coordinator_down = False  # init_transactions times out
        self.down_after_fault = False  # the coordinator becomes unreachable with the timed-out commit

    def end(self, txn, commit):
        if self.status[txn] == "open":
            self.status[txn] = "commit" if commit else "abort"
            if commit:
                self.committed.update(self.offsets.pop(txn, {}))

    def read_committed(self, topic, part, start=0):
        return [r for r, t in self.log.get((topic, part), []) if r.offset >= start and self.status[t] == "commit"]


class Future:
    is_done, exception = True, None

    def __init__(self, topic, partition, offset):
        self.value = type("Metadata", (), {"topic": topic, "partition": partition, "offset": offset})()

    def failed(self):
        return False


class Producer:
    """kafka-python's transactional KafkaProducer as TransactionalSink uses it."""

    def __init__(self, coordinator, **_config):
        self.c, self.txn, self.epoch, self.fatal = coordinator, None, None, None

    def init_transactions(self):
        if self.c.coordinator_down:
            raise kafka.errors.KafkaTimeoutError("Timeout expired while initializing transactional state")
        for t, s in self.c.status.items():  # finish what the previous producer of this id left
            if s == "open":
                self.c.end(t, commit=False)
        self.c.epoch += 1
        self.epoch = self.c.epoch

    def _usable(self):
        if self.fatal is not None:
            raise kafka.errors.KafkaError(f"Cannot execute transactional method because we are in an error state: "
                                          f"{self.fatal}")
        if self.epoch != self.c.epoch:
            raise kafka.errors.ProducerFencedError()

    def begin_transaction(self):
        self._usable()
        self.c.txn += 1
        self.txn = self.c.txn
        self.c.status[self.txn] = "open"

    def send(self, topic, key=None, value=None, partition=None, headers=None):
        self._usable()
        part = partition if partition is not None else zlib.crc32(key) % PARTS
        log = self.c.log.setdefault((topic, part), [])
        log.append((Record(topic, part, len(log), key, value), self.txn))
        return Future(topic, part, len(log) - 1)

    def flush(self, timeout=None):
        self._usable()

    def send_offsets_to_transaction(self, offsets, group_metadata):
        self._usable()
        self.c.offsets[self.txn] = {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}

    def commit_transaction(self):
        self._usable()
        self.c.commits += 1
        if self.c.commits == self.c.fault_at:
            if self.c.commit_arrives:
                self.c.end(self.txn, commit=True)
            self.c.coordinator_down = self.c.down_after_fault
            self.fatal = "RequestTimedOutError: Request timed out after 30000 ms"
            raise kafka.errors.KafkaError(f"Could not execute transactional request for unknown reasons: "
                                          f"{self.fatal}")
        self.c.end(self.txn, commit=True)

    def abort_transaction(self):
        self._usable()
        self.c.end(self.txn, commit=False)

    def close(self, timeout=None):
        pass


class Source(ListSource):
    def __init__(self, c):
        super().__init__(c.committed)
        self.c = c

    def records(self):
        return self.c.inputs

    def partitions(self):
        return [("ev", p) for p in range(PARTS)]

    def commit(self, offsets):
        raise AssertionError("exactly-once never commits offsets outside a transaction")

    def group_metadata(self):
        return "group"

    def read_partition(self, topic, partition, start=0, **_options):
        return self.c.read_committed(topic, partition, start)


def start(serving, c, monkeypatch, store=None):
    monkeypatch.setattr(sink_module, "KafkaProducer", lambda **cfg: Producer(c, **cfg))
    settings = load_settings(None, kafka={"topics": {"events": "ev", "predictions": "pred", "dead_letters": "dead"}},
                             engine={"max_batch": 9, "describe": False, "gc_tuning": False},
                             state={"processing_guarantee": "exactly-once"})
    sink = TransactionalSink(KafkaSettings(), StateSettings(instance_id="a"))
    return build_engine(settings, serving, Source(c), sink, store=store or MemoryStore())


def pending(c):
    return any(r.offset >= c.committed.get(r.tp, 0) for r in c.inputs)


@pytest.mark.parametrize("commit_arrives", [True, False], ids=["broker-committed", "broker-did-not-commit"])
def test_unknown_commit_outcome_is_settled_never_aborted_and_rewound(commit_arrives, monkeypatch):
    model, items, concepts, records, reference = setup(n_learners=12)
    serving = ServingModel(model, items, concepts, "v0")
    c = Coordinator(records)
    c.fault_at, c.commit_arrives = 3, commit_arrives
    engine = start(serving, c, monkeypatch)
    for _ in range(200):
        if not pending(c):
            break
        engine.step()
    assert not pending(c) and c.commits >= 3

    preds = [json.loads(r.value) for p in range(PARTS) for r in c.read_committed("pred", p)]
    keys = [(p["source"]["partition"], p["source"]["offset"]) for p in preds]
    assert len(keys) == len(set(keys)), "a read_committed reader sees no repeated prediction at all"
    assert set(keys) == {(r.partition, r.offset) for r in records}, "every input offset predicted, nothing else"
    assert not any(c.read_committed("dead", p) for p in range(PARTS))
    for p in preds:
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]

    _, expected = uninterrupted(serving, records, None)
    store = engine.cache.store
    for lid, ref in expected.items():  # the store and the cache both equal the uninterrupted run
        for st in (store.load(lid), engine.cache.get(lid)):
            assert st is not None and (st.last_offset, st.events) == (ref.last_offset, ref.events), lid
            assert all(torch.allclose(st.state[k], v, atol=1e-6) for k, v in ref.state.items()), lid

    assert engine.metrics.registry.get_sample_value("ktstream_batch_failures_total", {"stage": "commit_unknown"}) == 1
    assert ("abort" in c.status.values()) == (not commit_arrives), "settled as the broker had it"

    # still serving: one more event of a known learner commits exactly one more prediction
    first = records[0]
    lid = json.loads(first.value)["learner_id"]
    last = max(json.loads(r.value)["event_time"] for r in records if r.key == first.key)
    ev = json.loads(first.value) | {"event_id": "after", "event_time": last + 1000}
    c.inputs.append(Record("ev", first.partition, 1 + max(r.offset for r in records if r.partition == first.partition),
                           lid.encode(), json.dumps(ev).encode(), 0))
    while pending(c):
        engine.step()
    after = [json.loads(r.value) for p in range(PARTS) for r in c.read_committed("pred", p)]
    assert [p["event_id"] for p in after].count("after") == 1


def test_unknown_commit_outcome_that_cannot_be_settled_stops_without_abort_or_rewind(monkeypatch):
    """The coordinator is unreachable when the engine settles: it stops, and the restart's
    init_transactions settles the transaction (committed here), so nothing is committed twice."""
    model, items, concepts, records, reference = setup(n_learners=12)
    serving = ServingModel(model, items, concepts, "v0")
    c = Coordinator(records)
    c.fault_at = 3
    store = MemoryStore()
    engine = start(serving, c, monkeypatch, store)
    c.down_after_fault = True
    with pytest.raises(CommitOutcomeUnknownError, match="settling it failed"):
        for _ in range(20):
            engine.step()
    assert list(c.status.values()).count("abort") == 0 and c.status[c.txn] == "commit"
    assert all(pos >= c.committed.get(tp, 0) for tp, pos in engine.source.pos.items()), \
        "no rewind: the source stays where the unsettled batch left it"

    c.coordinator_down = False
    store.close()
    restarted = start(serving, c, monkeypatch, store)
    while pending(c):
        restarted.step()
    preds = [json.loads(r.value) for p in range(PARTS) for r in c.read_committed("pred", p)]
    keys = [(p["source"]["partition"], p["source"]["offset"]) for p in preds]
    assert len(keys) == len(set(keys)) and set(keys) == {(r.partition, r.offset) for r in records}
    _, expected = uninterrupted(serving, records, None)
    for lid, ref in expected.items():
        st = restarted.cache.get(lid)
        assert st is not None and (st.last_offset, st.events) == (ref.last_offset, ref.events), lid
        assert all(torch.allclose(st.state[k], v, atol=1e-6) for k, v in ref.state.items()), lid
