"""Fault: the changelog cannot be read at all. The restore retries, then fails loudly and processes nothing.

Also: at an equal source offset, a newer writer generation's state wins over an old owner's late write.
"""

from __future__ import annotations

import logging

import pytest
import torch

from ktstream.config import StateSettings
from ktstream.core import LearnerState
from ktstream.engine import StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.exceptions import EngineError
from ktstream.engine.metrics import EngineMetrics
from ktstream.engine.processor import Processor
from ktstream.serving.runner import ModelRunner
from ktstream.state import MemoryStore
from ktstream.state.changelog import changelog_topic, restore, to_changelog
from ktstream.state.manager import RestoreError, StateManager
from ktstream.state.metrics import StateMetrics
from tests.state.test_zombie_old_owner import Group, Member, Sink
from tests.state.test_store_engine import setup


def test_restore_retries_then_stops_not_ready_counted_logged(caplog):
    model, items, concepts, records, _ = setup(n_learners=5)
    group = Group(records)
    group.visible = len(records)
    group.committed = {tp: 3 for tp in {r.tp for r in records}}  # the store (empty) is behind: a restore is due
    store, metrics, pauses, calls = MemoryStore(), EngineMetrics(), [], []
    sink = Sink(group)

    def stalled(tp, start):
        calls.append(tp)
        raise EngineError(f"reading {tp}'s changelog made no progress for 30s")

    manager = StateManager(store, changelog_topic("ev"), sink, stalled, lambda tp: group.committed.get(tp),
                           StateSettings(restore_attempts=3, restore_backoff_s=0.5), metrics=StateMetrics(
                               metrics.registry), sleep=pauses.append)
    proc = Processor(ModelRunner(model, items, concepts, "v0"), StateCache(1 << 30, manager), "pred", "dead")
    engine = Engine(Member(group), sink, proc, metrics, state=manager)
    with caplog.at_level(logging.ERROR), pytest.raises(RestoreError) as err:
        engine.step()
    tp = err.value.partition
    assert len(calls) == 3 and pauses == [0.5, 1.0], "three attempts, doubling backoff"
    assert not manager.ready and not engine.ready() and tp in manager.failed
    assert metrics.registry.get_sample_value("ktstream_state_restore_failures_total",
                                             {"topic": tp[0], "partition": str(tp[1])}) == 1
    assert metrics.registry.get_sample_value("ktstream_state_restore_retries_total") == 2
    assert any(str(tp) in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert sink.pending == [] and group.logs == {}, "nothing processed, nothing sent"
    assert store.offset(tp) == -1 and store.changelog_offset(tp) == 0, "the checkpoint did not move"


def test_equal_source_offset_newer_generation_wins():
    def state(value, generation):
        st = LearnerState("a", {"h": torch.full((1, 2), value)}, "v", ("ev", 0), last_offset=7)
        return to_changelog(st, "cl", generation)

    from ktstream.core import Record
    newer, late = state(2.0, generation=4), state(1.0, generation=3)  # the old owner's write lands last
    log = [Record("cl", 0, i, o.key, o.value) for i, o in enumerate([newer, late])]
    store = MemoryStore()
    assert restore(store, ("ev", 0), lambda start: log[start:], committed=8) == (1, 2)
    assert torch.equal(store.load("a").state["h"], torch.full((1, 2), 2.0))
