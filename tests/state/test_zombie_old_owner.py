"""Fault: zombie old owner. An owner whose flush stalls writes its states after the new owner's (at-least-once).

An in-memory group (a log per topic partition, committed offsets, a generation
that every join bumps and every commit is checked against, as a Kafka group
coordinator does). Owner A (generation 1) processes a batch; its flush stalls;
meanwhile B (generation 2) takes the partitions over, restores, processes that
batch and later events, and commits. Then A's flush lands: its changelog
records, older states, come after B's newer ones; its commit is refused (stale
generation) and its predictions are repeats. C (generation 3), on an empty
store, restores and serves the rest. Restore must take each learner's newest
state (highest source offset), not the last record in the log.
"""

from __future__ import annotations

import json

from tests.support.state_chaos import reference
from ktstream.core import Record
from ktstream.engine import StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.exceptions import CommitError
from ktstream.engine.processor import Processor
from ktstream.models.checkpoint import ServingModel
from ktstream.serving.runner import ModelRunner
from ktstream.state import MemoryStore
from ktstream.state.changelog import changelog_meta, changelog_topic
from ktstream.state.manager import StateManager
from tests.support.accounting import account
from tests.support.list_source import ListSource
from tests.state.test_store_engine import setup

CHANGELOG = changelog_topic("ev")


class Group:
    def __init__(self, records):
        self.records, self.visible = records, 0  # records[:visible] have been published
        self.logs: dict[tuple[str, int], list[Record]] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.generation = 0

    def append(self, outputs) -> dict[tuple[str, int], int]:
        """Publish ``outputs``; the offset after each (topic, partition)'s last one (a sink's ``acked``)."""
        acked = {}
        for o in outputs:
            part = o.partition or 0
            log = self.logs.setdefault((o.topic, part), [])
            log.append(Record(o.topic, part, len(log), o.key, o.value))
            acked[(o.topic, part)] = len(log)
        return acked

    def pending(self) -> bool:
        return any(r.offset >= self.committed.get(r.tp, 0) for r in self.records[:self.visible])


class Member(ListSource):
    """A consumer-group member that owns every partition from its join on; its commits are fenced once
    the group has moved to a later generation."""

    def __init__(self, group: Group):
        super().__init__(group.committed)
        self.g, self.gen = group, -1

    def records(self):
        return self.g.records[:self.g.visible]

    def partitions(self):
        return sorted({r.tp for r in self.g.records})

    def joined(self):
        self.g.generation += 1
        self.gen = self.g.generation

    def commit(self, offsets):
        if self.gen != self.g.generation:
            raise CommitError(f"generation {self.gen} is stale (the group is at {self.g.generation})")
        super().commit(offsets)

    def generation(self):
        return self.gen


class Sink:
    """Flushes into the group's logs; ``stalled(callback)`` makes the next flush run ``callback`` first."""

    def __init__(self, group: Group):
        self.g, self.pending, self.on_stall, self.acked = group, [], None, {}

    def send(self, outputs):
        self.pending.extend(outputs)

    def flush(self, timeout_s):
        if self.on_stall is not None:
            stall, self.on_stall = self.on_stall, None
            stall()  # the world moves on while this flush hangs; then its records land, late
        self.acked = self.g.append(self.pending)
        self.pending = []

    def close(self):
        pass


def owner(group: Group, serving: ServingModel, store):
    member, sink = Member(group), Sink(group)
    state = StateManager(store, CHANGELOG, sink, lambda tp, start: group.logs.get((CHANGELOG, tp[1]), [])[start:],
                         lambda tp: group.committed.get(tp), generation=member.generation)
    proc = Processor(ModelRunner(serving.model, serving.items, serving.concepts, serving.version),
                     StateCache(1 << 30, state), "pred", "dead")
    engine = Engine(member, sink, proc, max_batch=9, state=state)
    return engine, state, sink


def drain(engine, group, steps=1000):
    for _ in range(steps):
        if not group.pending():
            return
        engine.step()
    raise AssertionError("the engine did not commit every visible record")


def test_zombie_old_owner_cannot_move_a_restored_state_backwards():
    model, items, concepts, records, reference_probs = setup(n_learners=20)
    serving = ServingModel(model, items, concepts, "v0")
    group, n = Group(records), len(records)

    a, _, a_sink = owner(group, serving, MemoryStore())
    group.visible = int(n * 0.4)
    drain(a, group)

    def meanwhile():  # A's flush hangs: B takes over, redoes A's batch, goes further, commits
        b, b_manager, _ = owner(group, serving, MemoryStore())
        group.visible = int(n * 0.8)
        drain(b, group)
        assert b_manager.restored_records > 0

    group.visible = int(n * 0.6)
    a_sink.on_stall, a.max_batch = meanwhile, n
    assert a.step() is None, "the zombie's commit must be refused"

    changelog = [changelog_meta(r.value) | {"at": r.offset} for p in range(3)
                 for r in group.logs.get((CHANGELOG, p), [])]
    last, newest = {}, {}
    for m in changelog:
        last[m["learner_id"]] = m
        newest[m["learner_id"]] = max(newest.get(m["learner_id"], m), m, key=lambda x: x["last_offset"])
    behind = [lid for lid in last if last[lid]["last_offset"] < newest[lid]["last_offset"]]
    assert behind, "the zombie's late flush must have put older states after newer ones"
    assert {last[lid]["generation"] for lid in behind} == {1}

    c_store = MemoryStore()
    c, c_manager, _ = owner(group, serving, c_store)
    group.visible = n
    drain(c, group)
    assert c.ready() and c_manager.ready and c_manager.restored_records > 0

    outputs = {t: [json.loads(r.value) for r in group.logs.get((t, 0), [])] for t in ("pred", "dead")}
    repeats = account(outputs["pred"], outputs["dead"], {(r.partition, r.offset) for r in records}, reference_probs)
    assert repeats > 0, "the zombie's predictions of its uncommitted batch are repeats (at-least-once)"

    _, ref_states = reference(serving, records, None)
    for lid, want in ref_states.items():
        for got in (c.cache.get(lid), c_store.load(lid)):
            assert got is not None and (got.last_offset, got.events) == (want.last_offset, want.events), lid
            assert all((got.state[k] - v).abs().max() <= 1e-6 for k, v in want.state.items()), lid
