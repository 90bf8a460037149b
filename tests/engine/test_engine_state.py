"""Learner state: byte-bounded LRU cache, the durable-store seam, and staging until the commit."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ktstream.core import OVERHEAD_BYTES, LearnerState, str_nbytes
from ktstream.data.histories import Interactions
from ktstream.engine.exceptions import SinkError
from ktstream.engine.records import MemorySink
from ktstream.engine.state_cache import StateCache
from ktstream.models import create
from ktstream.serving import layout_for


def learner(lid, floats=100, partition=("ev", 0)):
    return LearnerState(lid, {"h": torch.zeros(1, floats)}, "v1", partition=partition)


def test_lru_eviction_by_bytes():
    size = learner("a").nbytes
    assert size == 400 + OVERHEAD_BYTES + str_nbytes("a")
    cache = StateCache(max_bytes=3 * size)
    for lid in "abc":
        cache.put(learner(lid))
    cache.get("a")  # a is now the most recently used
    cache.put(learner("d"))
    assert sorted(cache.keys()) == ["a", "c", "d"] and cache.evictions == 1
    assert cache.bytes == 3 * size and len(cache) == 3
    cache.put(learner("a", floats=400))  # replacing an entry updates the byte count
    assert cache.bytes <= 3 * size + 1200 and "a" in cache
    assert cache.evict("a") is not None and "a" not in cache


def test_an_attention_cache_counts_its_whole_row_once():
    """A cache appended into spare slots holds its arena row: the bound in bytes counts all of it,
    once, also when the state at the step's start is in the same row."""
    model = create("sakt", n_items=10, n_concepts=5, window=8, dim=8, heads=2, ffn=16).eval()
    q = Interactions(torch.tensor([3]), torch.tensor([[2]]), torch.tensor([1]),
                     torch.tensor([1.7e9], dtype=torch.float64))
    with torch.inference_mode():
        layout, start = layout_for(model), model.init_state(1)
        first = layout.update_rows(start, q, [start])[0]
        second = layout.update_rows(first, q, [first])[0]
    row = sum(v.nbytes for k, v in first.items() if k != "count") * (8 + 16) // 8  # W + spare slots
    assert second.row is first.row
    st = LearnerState("a", second, "v1", step_state=first)
    assert st.nbytes == row + 8 + OVERHEAD_BYTES + str_nbytes("a")  # the row and a count, once


def test_working_copy_carries_every_field_and_shares_no_mutable_state():
    values = {"learner_id": "a", "state": {"h": torch.ones(1, 2)}, "model_version": "v7", "partition": ("ev", 3),
              "step_key": ("t", 5), "step_state": {"h": torch.zeros(1, 2)}, "last_event_time_ms": 5,
              "last_event_id": "e9", "last_offset": 41, "events": 9, "responses": 8, "late": 1,
              "window": (("q", (), 1, 5, None, 8),), "window_bytes": 240}
    assert set(values) == {f.name for f in dataclasses.fields(LearnerState)}, "new field: give it a value here"
    original = LearnerState(**values)
    work = original.copy()
    assert {f: getattr(work, f) for f in values} == values and work is not original
    work.applied({"h": torch.full((1, 2), 3.0)}, ("ev", 3), 42, "e10", 6, False)
    assert original.last_offset == 41 and original.events == 9 and torch.equal(original.state["h"], torch.ones(1, 2))


def test_evict_partitions_drops_only_their_learners():
    cache = StateCache(1 << 20)
    cache.put(learner("a", partition=("ev", 0)))
    cache.put(learner("b", partition=("ev", 1)))
    assert cache.evict_partitions([("ev", 1)]) == 1 and list(cache.keys()) == ["a"]


class FakeStore:
    def __init__(self):
        self.rows, self.writes, self.dropped = {}, [], []

    def load(self, lid):
        return self.rows.get(lid)

    def write(self, states, offsets):
        self.writes.append(([s.learner_id for s in states], dict(offsets)))
        self.rows.update({s.learner_id: s for s in states})

    def drop_partitions(self, partitions):
        self.dropped.extend(partitions)


def test_durable_store_seam_fills_misses_and_is_written_first():
    store = FakeStore()
    cache = StateCache(max_bytes=learner("x").nbytes, store=store)
    cache.apply([learner("a")], {("ev", 0): 5})
    assert store.writes == [(["a"], {("ev", 0): 5})]
    cache.put(learner("b"))  # evicts a from the cache, the store still has it
    assert "a" not in cache and cache.get("a") is store.rows["a"] and "a" in cache


def test_state_changes_only_after_the_commit_and_roll_back_on_sink_failure(kit):
    recs = kit.stream(n_learners=5, mean_length=8, seed=7, query_prob=0.0)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkt", items, concepts)
    records = kit.as_records(recs, partitions=1)
    engine, source, sink = kit.memory_engine(model, items, concepts, records, max_batch=10)
    engine.step()
    before = {lid: engine.cache.get(lid) for lid in list(engine.cache.keys())}
    batch = engine.processor.process(records[10:20])
    after = {lid: engine.cache.get(lid) for lid in list(engine.cache.keys())}
    assert before == after and all(before[k] is after[k] for k in before), "process() touched the cache"
    assert batch.staged and all(st is not engine.cache.get(st.learner_id) for st in batch.staged)

    class FailingSink(MemorySink):
        def flush(self, timeout_s):
            raise SinkError("broker down")

    seeks = []
    source.seek = lambda offsets: seeks.append(offsets)
    engine.sink = FailingSink()
    committed = dict(source.committed)
    with pytest.raises(SinkError):
        engine.step()
    assert source.committed == committed, "a batch whose outputs failed must not be committed"
    assert {lid: engine.cache.get(lid) for lid in list(engine.cache.keys())} == after, "staged state leaked"
    assert seeks == [{("t.events", 0): 10}], "the batch's partitions are rewound to its first offset"
    assert engine.metrics.totals["consumed"] == 10


