"""A crash injected at each step of the commit protocol, then a restart from the store and the changelog.

An in-memory "broker" keeps what survives a crash: topics (flushed outputs, by
partition) and the group's committed offsets. A crash abandons the engine and
its cache; a restart builds a new one over the same store, restores from the
changelog (ktstream.state.manager) and continues from the committed offsets.
The same three properties as the SIGKILL test must hold, and the crash between
the commit and the store write must really be repaired from the changelog.
"""

from __future__ import annotations

import json

import pytest
import torch

from ktstream.core import Record
from ktstream.engine import StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.serving.runner import ModelRunner
from ktstream.state import MemoryStore, SqliteStore
from ktstream.state.changelog import changelog_topic
from ktstream.state.manager import StateManager
from tests.state.test_store_engine import setup
from tests.support.list_source import ListSource

STEPS = ["process", "send", "flush", "commit", "store-write"]


class Crash(BaseException):
    """A process death (not an Exception: nothing in the engine may catch it)."""


class Broker:
    def __init__(self, records):
        self.inputs = records
        self.topics: dict[tuple[str, int], list[Record]] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.fault: str | None = None
        self.countdown = 0

    def hit(self, step):
        if self.fault == step:
            self.countdown -= 1
            if self.countdown == 0:
                raise Crash(step)


class Source(ListSource):
    def __init__(self, broker):
        super().__init__(broker.committed)
        self.b = broker

    def records(self):
        return self.b.inputs

    def commit(self, offsets):
        self.b.hit("commit")
        super().commit(offsets)


class Sink:
    def __init__(self, broker):
        self.b, self.pending, self.acked = broker, [], {}

    def send(self, outputs):
        self.b.hit("send")
        self.pending.extend(outputs)

    def flush(self, timeout_s):
        self.b.hit("flush")
        self.acked = {}
        for o in self.pending:
            part = o.partition or 0
            log = self.b.topics.setdefault((o.topic, part), [])
            log.append(Record(o.topic, part, len(log), o.key, o.value))
            self.acked[(o.topic, part)] = len(log)
        self.pending = []

    def close(self):
        pass


class Faulty:
    """A store backend with a crash inside its transaction when the broker asks for one."""

    def __init__(self, *args, broker, **kwargs):
        super().__init__(*args, **kwargs)
        self.b = broker

    def write(self, states, offsets, changelog=None):
        if self.b.fault == "store-write" and states:
            self.b.countdown -= 1
            if self.b.countdown == 0:  # a crash inside the last partition's transaction, after its rows
                super().write(states + [_Boom(list(offsets)[-1])], offsets, changelog)
        super().write(states, offsets, changelog)


class FaultySqliteStore(Faulty, SqliteStore):
    pass


class FaultyMemoryStore(Faulty, MemoryStore):
    pass


class _Boom:
    def __init__(self, partition):
        self.partition, self.learner_id = partition, "boom"

    def __getattr__(self, name):
        raise Crash("store-write")


def start(model, items, concepts, broker, store):
    topic, sink = changelog_topic("ev"), Sink(broker)
    state = StateManager(store, topic, sink, lambda tp, start: broker.topics.get((topic, tp[1]), [])[start:],
                         lambda tp: broker.committed.get(tp))
    proc = Processor(ModelRunner(model, items, concepts, "v0"), StateCache(1 << 30, state), "pred", "dead")
    process = proc.process_decoded
    proc.process_decoded = lambda *decoded: (broker.hit("process"), process(*decoded))[1]
    engine = Engine(Source(broker), sink, proc, max_batch=9, state=state)
    return engine, state


def pending(records, broker):
    return any(r.offset >= broker.committed.get(r.tp, 0) for r in records)


@pytest.mark.parametrize("overlap", [False, True], ids=["flush-each", "overlapped"])
@pytest.mark.parametrize("backend", ["sqlite", "memory"])
@pytest.mark.parametrize("step", STEPS)
def test_crash_at_each_step_keeps_the_three_properties(step, backend, overlap, tmp_path):
    """``overlapped``: each batch's flush, commit and apply come after the next batch was polled and decoded,
    as ``Engine.run`` does it."""
    model, items, concepts, records, reference = setup(n_learners=12)
    broker = Broker(records)
    inner = FaultySqliteStore(tmp_path, broker=broker) if backend == "sqlite" else FaultyMemoryStore(broker=broker)
    restored = 0
    for crash in range(4):  # crash at the 3rd, 6th, 9th, 12th time the step is reached, then run to the end
        broker.fault, broker.countdown = step, 3
        engine, manager = start(model, items, concepts, broker, inner)
        with pytest.raises(Crash):
            while pending(records, broker):
                engine.step(overlap)
        restored += manager.restored_records
        inner.close()
    broker.fault = None
    engine, manager = start(model, items, concepts, broker, inner)
    while pending(records, broker):
        engine.step(overlap)
    restored += manager.restored_records
    if step == "store-write":
        assert restored > 0, "a crash between the commit and the store write must be repaired from the changelog"
    preds = [json.loads(r.value) for r in broker.topics[("pred", 0)]]
    by_event = {}
    for p in preds:  # only same-offset repeats, with the same values
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]
        by_event.setdefault((p["source"]["partition"], p["source"]["offset"]), set()).add(p["event_id"])
    assert set(by_event) == {(r.partition, r.offset) for r in records}, "every input offset predicted, nothing else"
    assert all(len(v) == 1 for v in by_event.values())
    final = {lid: engine.cache.get(lid) for lid in {json.loads(r.value)["learner_id"] for r in records}}
    inner.close()
    for tp in {r.tp for r in records}:
        inner.open(tp)
    for lid, st in final.items():  # the store equals what the engine serves, which matches the offline replay
        stored = inner.load(lid)
        assert stored is not None and stored.last_offset == st.last_offset and stored.events == st.events
        assert all(torch.allclose(stored.state[k], v, atol=1e-6) for k, v in st.state.items())
    assert sum(st.events for st in final.values()) == len(records)
