"""Overlapped delivery (``Engine.run``, ``engine.overlap_delivery``): a full batch's outputs are flushed, its
offsets committed and its states applied only after the next batch was polled and decoded. The commit
protocol's order per batch must not change: acknowledged, then committed, then applied; a failure rolls
back the batch in flight and whatever the next poll returned; a rebalance or a swap delivers it first."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from ktstream.engine import MemorySink, StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.exceptions import CommitError, SinkError
from ktstream.engine.processor import Processor
from ktstream.serving.runner import ModelRunner
from tests.state.test_store_engine import setup
from tests.support.list_source import ListSource


class Source(ListSource):
    """Every record published up front; calls logged; a commit fails when ``fail_commit`` says so."""

    def __init__(self, records, log):
        super().__init__({})
        self.inputs, self.log, self.fail_commit, self.commits = records, log, set(), 0
        self.before_poll = self.after_fetch = lambda: None
        self.timeouts: list[float] = []

    def records(self):
        return self.inputs

    def poll(self, timeout_s, max_records):
        self.before_poll()
        out = super().poll(timeout_s, max_records)
        self.after_fetch()  # a callback a client runs after it fetched
        self.log.append(("poll", len(out)))
        self.timeouts.append(timeout_s)
        return out

    def commit(self, offsets):
        self.commits += 1
        if self.commits in self.fail_commit:
            self.log.append(("commit-failed", None))
            raise CommitError("injected")
        super().commit(offsets)
        self.log.append(("commit", sum(offsets.values())))

    def pending(self):
        return any(r.offset >= self.offsets.get(r.tp, 0) for r in self.inputs)


class Sink(MemorySink):
    def __init__(self, log):
        super().__init__()
        self.log, self.fail_flush, self.flushes = log, set(), 0

    def send(self, outputs):
        outputs = list(outputs)
        self.log.append(("send", len(outputs)))
        super().send(outputs)

    def flush(self, timeout_s):
        self.flushes += 1
        if self.flushes in self.fail_flush:
            self.sent = []  # the broker never acknowledged them
            self.log.append(("flush-failed", None))
            raise SinkError("injected")
        self.log.append(("flush", len(self.sent)))
        super().flush(timeout_s)


def engine_for(n_learners=12, max_batch=9):
    model, items, concepts, records, reference = setup(n_learners=n_learners)
    log: list = []
    source, sink = Source(records, log), Sink(log)
    proc = Processor(ModelRunner(model, items, concepts, "v0"), StateCache(1 << 30), "pred", "dead")
    return Engine(source, sink, proc, max_batch=max_batch), records, reference


def check(engine, records, reference):
    """Every input offset predicted with the reference's numbers (repeats only at the same offset, with the
    same numbers), and each learner's state holds each of its events exactly once."""
    seen: dict = {}
    for o in engine.sink.flushed:
        p = json.loads(o.value)
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]
        seen.setdefault((p["source"]["partition"], p["source"]["offset"]), set()).add(p["event_id"])
    assert set(seen) == {(r.partition, r.offset) for r in records} and all(len(v) == 1 for v in seen.values())
    learners = {json.loads(r.value)["learner_id"] for r in records}
    assert sum(engine.cache.get(lid).events for lid in learners) == len(records)


def test_run_flushes_each_full_batch_after_the_next_poll_and_a_partial_one_within_its_turn():
    engine, records, reference = engine_for()
    log = engine.source.log
    engine.run(threading.Event(), until=lambda: not engine.source.pending())
    check(engine, records, reference)
    sends = [i for i, (what, _) in enumerate(log) if what == "send"]
    full = [i for i in sends if log[i][1] == engine.max_batch]  # one output per record: a full batch
    assert len(full) > 3 and len(records) % engine.max_batch, "full batches, then a partial last one"
    for i in full:  # sent, the next poll (without waiting for records), then flush and commit
        assert [what for what, n in log[i + 1 : i + 4]] == ["poll", "flush", "commit"], log[i : i + 4]
    polls = [i for i, (what, _) in enumerate(log) if what == "poll"]
    after_send = [engine.source.timeouts[k] for k, i in enumerate(polls) if i > 0 and log[i - 1][0] == "send"]
    assert after_send and set(after_send) == {0.0}, "with a batch in flight the poll must not wait for records"
    assert engine.source.timeouts[0] == engine.poll_timeout_s > 0
    last = sends[-1]
    assert log[last][1] < engine.max_batch and [w for w, _ in log[last + 1 : last + 3]] == ["flush", "commit"]


def test_finish_delivers_the_batch_in_flight():
    engine, records, reference = engine_for()
    engine.step(overlap=True)
    batch = engine._pending
    assert batch is not None and engine.sink.sent and not engine.source.offsets
    engine.finish()
    assert engine._pending is None and not engine.sink.sent and engine.source.offsets == batch.offsets


def test_step_without_overlap_delivers_each_batch_within_its_turn():
    engine, records, reference = engine_for()
    while engine.source.pending():
        engine.step()
        assert engine._pending is None and not engine.sink.sent
    check(engine, records, reference)


@pytest.mark.parametrize("max_batch", [2, 9])  # 2: the next poll often reads partitions the batch in flight has not
@pytest.mark.parametrize("fault", ["flush", "commit"])
@pytest.mark.parametrize("turns", [{2}, {3, 4}, {2, 5, 6, 9}])
def test_a_failed_delivery_rolls_back_the_batch_in_flight_and_the_records_polled_after_it(fault, turns, max_batch):
    engine, records, reference = engine_for(max_batch=max_batch)
    (engine.sink.fail_flush if fault == "flush" else engine.source.fail_commit).update(turns)
    failures = 0
    while engine.source.pending():
        try:
            engine.step(overlap=True)
        except SinkError:
            failures += 1  # the run loop retries after a pause
    assert failures == (len(turns) if fault == "flush" else 0)
    assert engine.metrics.failures.labels("sink" if fault == "flush" else "commit")._value.get() == len(turns)
    check(engine, records, reference)


def test_a_revocation_inside_the_poll_delivers_the_batch_in_flight_first():
    engine, records, reference = engine_for()
    seen = []

    def revoke_once():
        if engine._pending is not None and not seen:
            in_flight = dict(engine._pending.offsets)
            engine.on_revoked([])  # as a client calls it from inside its poll
            committed = {tp: engine.source.offsets.get(tp) for tp in in_flight}
            seen.append((in_flight, committed, engine._pending, list(engine.sink.sent)))

    engine.source.before_poll = revoke_once
    while engine.source.pending():
        engine.step(overlap=True)
    engine.step()
    in_flight, committed, pending_after, unsent = seen[0]
    assert committed == in_flight and pending_after is None and unsent == []
    check(engine, records, reference)


def test_a_failed_delivery_inside_the_poll_drops_what_the_poll_returned_and_raises_after_it():
    engine, records, reference = engine_for()
    raised = []

    def revoke_once():
        if engine._pending is not None and not raised:
            engine.sink.fail_flush.add(engine.sink.flushes + 1)
            engine.on_revoked([])
            raised.append(True)

    engine.source.before_poll = revoke_once
    with pytest.raises(SinkError):
        while engine.source.pending():
            engine.step(overlap=True)
    while engine.source.pending():
        engine.step(overlap=True)
    engine.step()
    check(engine, records, reference)


def test_a_loss_inside_the_poll_drops_the_batch_in_flight_and_what_the_poll_fetched():
    engine, records, reference = engine_for()
    lost = []

    def lose_once():
        if engine._pending is not None and not lost:
            lost.append(dict(engine._pending.offsets))
            engine.on_lost([])

    engine.source.after_fetch = lose_once
    while engine.source.pending():
        engine.step(overlap=True)
    engine.step()
    assert lost and engine.metrics.failures.labels("commit")._value.get() == 1
    check(engine, records, reference)


def test_exactly_once_keeps_its_one_transaction_per_turn():
    engine, _, _ = engine_for()

    class TransactionalSink(Sink):
        transactional = True

    assert engine.overlap_delivery
    assert not Engine(engine.source, TransactionalSink([]), engine.processor, overlap_delivery=True).overlap_delivery
