"""The engine over a durable store: a tiny hot cache, and a restart from the store, both equal the offline stepwise serving pass."""

from __future__ import annotations

import json
import zlib

import pytest
import torch

from ktstream.core import Record
from ktstream.data.histories import build_vocabularies, collate, encode
from ktstream.data.simulate import simulate
from ktstream.engine import MemorySink, MemorySource, StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.engine.replay import replay_order
from ktstream.models import create, family
from ktstream.models.stepwise import predict_stepwise
from ktstream.serving.runner import ModelRunner
from ktstream.state import MemoryStore, SqliteStore

PARTS = 3


def setup(name="dkt", n_learners=15):
    recs = replay_order(simulate(n_learners=n_learners, mean_length=12, seed=3, step_prob=0.3, query_prob=0.1,
                                 start_spread_ms=60_000, n_items=30, n_concepts=6))
    items, concepts = build_vocabularies(recs)
    torch.manual_seed(0)
    model = create(name, n_items=len(items), n_concepts=len(concepts), n_categories=2,
                   **family(name).tiny_config).eval()
    offsets, records = [0] * PARTS, []
    for r in recs:
        p = zlib.crc32(r["learner_id"].encode()) % PARTS
        records.append(Record("ev", p, offsets[p], r["learner_id"].encode(), json.dumps(r).encode(), 0))
        offsets[p] += 1
    hs = encode(recs, items, concepts)
    probs, _ = predict_stepwise(model, collate(hs))
    reference = {eid: probs[b, t] for b, h in enumerate(hs) for t, eid in enumerate(h.event_ids)}
    return model, items, concepts, records, reference


def run(model, items, concepts, records, store, cache_bytes):
    for tp in {r.tp for r in records}:
        store.open(tp)
    source, sink = MemorySource(records), MemorySink()
    proc = Processor(ModelRunner(model, items, concepts, "v0"), StateCache(cache_bytes, store), "pred", "dead")
    engine = Engine(source, sink, proc, max_batch=7)
    while source.pending:
        engine.step()
    return [json.loads(o.value) for o in sink.flushed if o.topic == "pred"], engine


def check(preds, reference):
    for p in preds:
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]


@pytest.mark.parametrize("name", ["dkt", "dkvmn"])
def test_tiny_cache_over_store_equals_offline(name, tmp_path):
    model, items, concepts, records, reference = setup(name)
    preds, engine = run(model, items, concepts, records, SqliteStore(tmp_path), cache_bytes=1)
    assert sorted(p["event_id"] for p in preds) == sorted(reference)
    assert engine.cache.evictions > len(records) // 2, "the cache must really be too small"
    check(preds, reference)


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
def test_restart_from_the_store_continues_exactly(backend, tmp_path):
    model, items, concepts, records, reference = setup()
    cut = len(records) // 2
    first = SqliteStore(tmp_path) if backend == "sqlite" else MemoryStore()
    preds1, _ = run(model, items, concepts, records[:cut], first, cache_bytes=1 << 30)
    first.close()
    second = SqliteStore(tmp_path) if backend == "sqlite" else first
    done = {tp: second.open(tp) for tp in {r.tp for r in records}}
    assert done == {tp: max(r.offset for r in records[:cut] if r.tp == tp) + 1 for tp in done}
    rest = [r for r in records if r.offset >= done[r.tp]]
    preds2, _ = run(model, items, concepts, rest, second, cache_bytes=1 << 30)  # fresh cache: all from the store
    assert sorted(p["event_id"] for p in preds1 + preds2) == sorted(reference)
    check(preds1 + preds2, reference)
