"""Hot swap in the engine: after a swap every prediction is the new model's, computed from the learner's history.

The engine serves half of a stream with one model, swaps in another (other
weights, vocabularies built from less data) between micro-batches, and serves
the rest. Each prediction must carry the version that made it, versions never
go back, and each must equal (1e-6) the offline stepwise serving pass of its
version's model over the learner's whole history: learner states were rebuilt
from their raw windows, not restarted.
"""

from __future__ import annotations

import gc
import json
from types import SimpleNamespace

import pytest
import torch

from ktstream.core import WindowRecord
from ktstream.engine.processor import Processor
from ktstream.engine.state_cache import StateCache
from ktstream.serving.runner import ModelRunner
from ktstream.state.codec import decode, encode


def swap_run(kit, name, window=10_000, mean_length=14, swap_after=0.5, max_batch=40):
    recs = kit.stream(n_learners=25, mean_length=mean_length, seed=3, query_prob=0.1)
    items, concepts = kit.build_vocabularies(recs)
    old = kit.tiny_model(name, items, concepts, seed=1)
    new_items, new_concepts = kit.build_vocabularies(recs[: len(recs) // 3])  # later ids are unknown to it
    new = kit.tiny_model(name, new_items, new_concepts, seed=2)
    engine, source, sink = kit.memory_engine(old, items, concepts, kit.as_records(recs), max_batch=max_batch,
                                             version="v000001")
    engine.processor.window = window
    while len(kit.outputs(sink, kit.PREDICTIONS)) < swap_after * len(recs):
        engine.step()
    engine.swap(SimpleNamespace(model=new, items=new_items, concepts=new_concepts, version="v000002"))
    kit.drain(engine, source)
    preds = kit.outputs(sink, kit.PREDICTIONS)
    refs = {"v000001": kit.offline(old, recs, items, concepts), "v000002": kit.offline(new, recs, new_items,
                                                                                       new_concepts)}
    return SimpleNamespace(recs=recs, preds=preds, refs=refs, engine=engine, new=new, new_items=new_items,
                           new_concepts=new_concepts)


@pytest.mark.parametrize("name", ["dkt", "dkvmn", "sakt", "akt", "deep-gpcm"])
def test_predictions_after_a_swap_are_the_new_models_over_the_whole_history(kit, name):
    run = swap_run(kit, name)
    assert sorted(p["event_id"] for p in run.preds) == sorted(r["event_id"] for r in run.recs)
    versions = [p["model_version"] for p in run.preds]
    first_new = versions.index("v000002")
    assert 0 < first_new and set(versions[first_new:]) == {"v000002"}, "versions must not go back"
    for p in run.preds:
        expected = run.refs[p["model_version"]][p["event_id"]]
        assert torch.allclose(torch.tensor(p["probs"]), expected, atol=1e-6), (name, p["event_id"])
    swapped_learners = {p["learner_id"] for p in run.preds[first_new:]}
    assert run.engine.metrics.rebuilt.labels("lazy")._value.get() >= 1
    assert len(swapped_learners) > 5


def test_the_old_model_would_have_predicted_otherwise(kit):
    """The check above can fail: after the swap the old model's (and a restarted state's) numbers differ."""
    run = swap_run(kit, "dkt")
    after = [p for p in run.preds if p["model_version"] == "v000002"]
    old = [torch.tensor(p["probs"]) for p in after]
    assert not all(torch.allclose(o, run.refs["v000001"][p["event_id"]], atol=1e-3) for o, p in zip(old, after))
    fresh = kit.offline(run.new, [r for r in run.recs if r["event_id"] in {p["event_id"] for p in after}],
                        run.new_items, run.new_concepts)  # learners restarted at the swap
    assert not all(torch.allclose(torch.tensor(p["probs"]), fresh[p["event_id"]], atol=1e-3) for p in after)


def test_windowed_attention_is_rebuilt_exactly_from_its_receptive_field(kit):
    """SAKT (window 8) rebuilt from only its last 8 interactions, on histories of about 30."""
    probe = kit.tiny_model("sakt", *kit.build_vocabularies(kit.stream(n_learners=2)), seed=0)
    run = swap_run(kit, "sakt", window=probe.receptive_field(), mean_length=30)
    for p in run.preds:
        expected = run.refs[p["model_version"]][p["event_id"]]
        assert torch.allclose(torch.tensor(p["probs"]), expected, atol=1e-6), p["event_id"]


def test_background_pass_rebuilds_idle_learners_to_the_new_models_state(kit):
    recs = kit.stream(n_learners=30, mean_length=10, seed=5, query_prob=0.0)
    items, concepts = kit.build_vocabularies(recs)
    old, new = kit.tiny_model("dkt", items, concepts, seed=1), kit.tiny_model("dkt", items, concepts, seed=2)
    engine, source, _ = kit.memory_engine(old, items, concepts, kit.as_records(recs), version="a")
    engine.rebuild_chunk = 7
    kit.drain(engine, source)
    engine.swap(SimpleNamespace(model=new, items=items, concepts=concepts, version="b"))
    cache = engine.cache
    order = list(cache.keys())
    steps = 0
    while engine.processor.stale:
        assert engine.step() is None  # nothing to read: only the background pass runs
        steps += 1
    assert steps == -(-len(order) // 7) and list(cache.keys()) == order, "chunked, LRU order kept"
    assert {cache.peek(lid).model_version for lid in order} == {"b"}
    assert engine.metrics.rebuilt.labels("background")._value.get() == len(order)
    from ktstream.data.histories import collate, encode as encode_histories
    from ktstream.models.stepwise import predict_stepwise

    hs = encode_histories(recs, items, concepts)
    _, final = predict_stepwise(new, collate(hs))
    for b, h in enumerate(hs):
        got = cache.peek(h.learner_id).state
        for key, t in final.items():
            assert torch.allclose(got[key][0], t[b], atol=1e-6), (h.learner_id, key)


def test_raw_window_is_bounded_and_survives_the_store_codec(kit):
    recs = kit.stream(n_learners=4, mean_length=20, seed=7)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkt", items, concepts)
    engine, source, _ = kit.memory_engine(model, items, concepts, kit.as_records(recs))
    engine.processor.window = 5
    kit.drain(engine, source)
    for lid in engine.cache.keys():
        st = engine.cache.peek(lid)
        mine = [r for r in recs if r["learner_id"] == lid]
        answered = [r for r in mine if r.get("response") is not None]
        window = [WindowRecord._make(w) for w in st.window]
        assert len(mine) > 10 and 5 <= len([w for w in window if w.response is not None]) < len(answered)
        assert [w.item_id for w in window] == [r["item_id"] for r in mine][-len(window):]
        assert [w.response for w in window] == [r.get("response") for r in mine][-len(window):]
        assert [list(w.concept_ids) for w in window] == [r["concept_ids"] for r in mine][-len(window):]
        assert window[0].response is not None, "no request before the oldest kept interaction"
        back = decode(encode(st))
        assert back.window == st.window and {type(w) for w in back.window} == {type(w) for w in st.window} == {tuple}


def test_raw_windows_leave_the_garbage_collector(kit):
    """Raw windows are most of what a cache of long histories holds. As plain tuples of ids and numbers the
    collector stops tracking them once it has looked at them and at the tuples they hold (a tuple is looked
    at before what it holds: a record's concepts first, then the record, then the window); named tuples it
    would scan until they are frozen, and a full collection would walk them all. Restored windows too."""
    recs = kit.stream(n_learners=4, mean_length=20, seed=7)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, _ = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                          kit.as_records(recs))
    kit.drain(engine, source)
    states = [engine.cache.peek(lid) for lid in engine.cache.keys()]
    states += [decode(encode(st)) for st in states]
    gc.collect()
    gc.collect()
    for st in states:
        assert len(st.window) > 1 and not any(gc.is_tracked(w) for w in st.window), st.learner_id
    gc.collect()
    assert not any(gc.is_tracked(st.window) for st in states)


def test_a_stale_state_from_the_store_is_rebuilt_on_its_next_event(kit):
    """A learner whose stored state was built by another version is rebuilt lazily when it comes back."""
    recs = kit.stream(n_learners=6, mean_length=12, seed=9, query_prob=0.0)
    items, concepts = kit.build_vocabularies(recs)
    old, new = kit.tiny_model("dkvmn", items, concepts, seed=1), kit.tiny_model("dkvmn", items, concepts, seed=2)
    first, second = recs[: len(recs) // 2], recs[len(recs) // 2:]
    engine, source, _ = kit.memory_engine(old, items, concepts, kit.as_records(first), version="a")
    kit.drain(engine, source)
    stored = {lid: decode(encode(engine.cache.peek(lid))) for lid in engine.cache.keys()}

    class Store:  # a durable store holding the old version's states
        def load(self, lid):
            return stored.get(lid)

        def write(self, states, offsets):
            pass

        def drop_partitions(self, partitions):
            pass

    proc = Processor(ModelRunner(new, items, concepts, "b"), StateCache(1 << 30, Store()), kit.PREDICTIONS,
                     kit.DEAD)
    later = {r["event_id"] for r in second}
    tail = [rec for rec in kit.as_records(recs) if json.loads(rec.value)["event_id"] in later]
    batch = proc.process(tail)
    assert batch.rebuilt == len({r["learner_id"] for r in second} & set(stored))
    reference = kit.offline(new, recs, items, concepts)
    for out in batch.outputs:
        p = json.loads(out.value)
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]


def test_raw_window_keeps_at_least_the_last_interactions_and_stays_bounded():
    from ktstream.core import W_ITEM, W_SEQ, LearnerState

    st = LearnerState("u", {}, "v")
    for i in range(500):
        st.remember((f"q{i}", ("c",), i % 2, i, None, i, None), keep=40)
        answered = [int(r[W_ITEM][1:]) for r in st.window]
        assert answered == list(range(max(0, i + 1 - len(answered)), i + 1)), "the most recent, in order"
        assert min(i + 1, 40) <= len(st.window) <= 48
    one_step = LearnerState("v", {}, "v")
    for i in range(500):  # one endless step (same event time): cut at 2 * keep
        one_step.remember(("q", ("c",), 1, 7, None, i, None), keep=40)
    assert len(one_step.window) == 80 and one_step.window[-1][W_SEQ] == 499
