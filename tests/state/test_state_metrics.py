"""State metrics: checkpoint timings, store sizes and restores reach the engine's registry."""

from __future__ import annotations

import torch
from prometheus_client import CollectorRegistry

from ktstream.core import LearnerState
from ktstream.state import MemoryStore
from ktstream.state.changelog import restore, to_changelog
from ktstream.state.metrics import StateMetrics


def value(reg, name, **labels):
    return reg.get_sample_value(name, labels or None)


def test_checkpoints_sizes_and_restores_are_measured():
    reg = CollectorRegistry()
    m = StateMetrics(reg, gauge_interval_s=0.0)
    store = MemoryStore(metrics=m)
    tp = ("ev", 1)
    store.open(tp)
    states = [LearnerState(f"u{i}", {"h": torch.ones(1, 10)}, "v", tp, last_offset=i) for i in range(3)]
    store.write(states, {tp: 3})
    assert value(reg, "ktstream_state_checkpoint_seconds_count") == 1
    assert value(reg, "ktstream_state_learners_stored", topic="ev", partition="1") == 3
    assert value(reg, "ktstream_state_store_bytes", topic="ev", partition="1") == store.nbytes(tp) > 120
    assert value(reg, "ktstream_state_partitions_assigned") == 1
    later = [LearnerState("u0", {"h": torch.zeros(1, 10)}, "v", tp, last_offset=5)]
    n, read = restore(store, tp, lambda start: [_rec(to_changelog(s, "cl")) for s in later][start:], committed=6)
    m.on_restored(tp, n, read, 0.01)
    assert n == 1 and value(reg, "ktstream_state_restored_records_total") == 1
    assert value(reg, "ktstream_state_restore_read_records_total") == 1 and store.changelog_offset(tp) == 1
    assert torch.equal(store.load("u0").state["h"], torch.zeros(1, 10)) and store.offset(tp) == 6
    store.drop_partitions([tp])
    assert value(reg, "ktstream_state_learners_stored", topic="ev", partition="1") is None
    assert value(reg, "ktstream_state_partitions_assigned") == 0


def _rec(out):
    from ktstream.core import Record

    return Record(out.topic, out.partition, 0, out.key, out.value)
