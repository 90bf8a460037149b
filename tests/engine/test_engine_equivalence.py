"""The engine's predictions equal the offline prequential replay of the same model on the same stream."""

from __future__ import annotations

import pytest
import torch

from ktstream.core import W_SEQ
from ktstream.models import names
from ktstream.serving import WindowedCacheLayout


CASES = [(name, 37) for name in names()] + [("dkt", 1), ("dkvmn", 1)]  # 1: every event its own micro-batch


@pytest.mark.parametrize("name,max_batch", CASES)
def test_engine_matches_offline_replay(name, max_batch, kit):
    recs = kit.stream(n_learners=12, mean_length=12, seed=4)
    items, concepts = kit.build_vocabularies(recs[: len(recs) // 2])  # later ids map to "unknown"
    model = kit.tiny_model(name, items, concepts)
    reference = kit.offline(model, recs, items, concepts)
    engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(recs), max_batch=max_batch)
    kit.drain(engine, source)
    preds = kit.outputs(sink, kit.PREDICTIONS)
    assert sorted(p["event_id"] for p in preds) == sorted(r["event_id"] for r in recs), "one prediction per event"
    for p in preds:
        expected = reference[p["event_id"]]
        assert torch.allclose(torch.tensor(p["probs"], dtype=torch.float32), expected, atol=1e-6), \
            f"{name}: {p['event_id']} streamed {p['probs']} vs offline {expected.tolist()}"
    assert not kit.outputs(sink, kit.DEAD)


@pytest.mark.parametrize("name", names())
def test_chunked_waves_give_the_same_messages(name, kit, monkeypatch):
    """Waves run in chunks stacked into reused buffers (ktstream.serving.runner): chunks of one and of
    three learners give the messages of unchunked waves (probabilities, ability, mastery, extras), so
    nothing a chunk returns aliases a buffer the next chunk overwrites."""
    import ktstream.serving.runner as runner

    recs = kit.stream(n_learners=12, mean_length=12, seed=6)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(name, items, concepts)
    messages = {}
    for chunk in (None, 1, 3):
        if chunk is not None:
            monkeypatch.setattr(runner.ModelRunner, "_chunk_size", lambda self, wave, n=chunk: n)
        engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(recs), max_batch=64)
        kit.drain(engine, source)
        messages[chunk] = {p["event_id"]: {k: v for k, v in p.items() if not k.endswith("_at_ms")}
                           for p in kit.outputs(sink, kit.PREDICTIONS)}
    assert len(messages[None]) == len(recs)
    assert close(messages[1], messages[None]) and close(messages[3], messages[None])


@pytest.mark.parametrize("name", ["sakt", "simplekt"])
def test_appending_a_micro_batch_then_predicting_matches_running_each_wave(name, kit, monkeypatch):
    """Models whose updates append entries made from the interactions alone (``Layout.entries``)
    apply a micro-batch's waves first and predict every event afterwards in one call
    (ktstream.serving.runner). Messages and learner states (windows, step starts, raw windows,
    counters) equal those of running each wave through the model, steps and prediction-only
    events included."""
    recs = kit.stream(n_learners=10, mean_length=14, seed=7)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(name, items, concepts)
    calls = []  # model calls (predictions) per run: one per micro-batch when appending, one per wave otherwise
    monkeypatch.setattr(model, "predict", lambda *a, f=model.predict, **k: calls.append(1) or f(*a, **k))
    runs = []
    for waves_alone in (False, True):
        if waves_alone:
            monkeypatch.setattr(WindowedCacheLayout, "entries", lambda self, interactions: None)
        calls.clear()
        engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(recs), max_batch=40)
        kit.drain(engine, source)
        messages = {p["event_id"]: {k: v for k, v in p.items() if not k.endswith("_at_ms")}
                    for p in kit.outputs(sink, kit.PREDICTIONS)}
        runs.append((messages, {lid: engine.cache.peek(lid) for lid in engine.cache.keys()}, len(calls)))
    (batched, batched_states, batched_calls), (waves, wave_states, wave_calls) = runs
    assert batched_calls < wave_calls, f"the appending path did not run: {batched_calls} vs {wave_calls} model calls"
    assert len(batched) == len(recs) and close(batched, waves)
    assert batched_states.keys() == wave_states.keys()
    steps_open = 0
    for lid, a in batched_states.items():
        b = wave_states[lid]
        assert (a.window, a.step_key, a.events, a.responses, a.last_offset) == \
            (b.window, b.step_key, b.events, b.responses, b.last_offset)
        seqs = [r[W_SEQ] for r in a.window]
        assert seqs == list(range(a.events - len(seqs) + 1, a.events + 1)), "seq: the learner's event count"
        for mine, theirs in ((a.state, b.state), (a.step_state, b.step_state)):
            assert (mine is None) == (theirs is None)
            if mine is not None:
                assert all(torch.allclose(mine[k].double(), theirs[k].double(), atol=1e-6, equal_nan=True)
                           for k in theirs)
        steps_open += a.step_state is not None
    assert steps_open, "no learner ended with an open step: the stream no longer tests step starts"


@pytest.mark.parametrize("name", ["dkt", "dkvmn", "deep-gpcm"])
def test_prepared_rows_predict_and_update_as_the_plain_rows(name, kit, monkeypatch):
    """Recurrent models compute what predict and update derive from the events alone once per
    micro-batch (``ktstream.serving.runner.Prepares``); each wave takes its rows. Any rows of a prepared micro-batch
    (a slice, or picked rows) predict and update exactly as the same rows unprepared, and the
    engine hands the model prepared rows."""
    from ktstream.data.histories import Interactions, Prepared

    recs = kit.stream(n_learners=6, mean_length=6, seed=8)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(name, items, concepts)
    g = torch.Generator().manual_seed(0)
    n = 9
    batch = Interactions(torch.randint(1, len(items), (n,), generator=g),
                         torch.randint(0, len(concepts), (n, 2), generator=g),
                         torch.tensor([1, 0, -1, 1, 1, 0, 0, 1, -1]), torch.arange(n, dtype=torch.float64))
    with torch.inference_mode():
        state = model.init_state(3)
        prepared = model.prepare(batch)
        assert isinstance(prepared, Prepared) and prepared.derived
        for index in (slice(2, 5), torch.tensor([7, 0, 3])):
            mine, plain = prepared.take(index), batch.take(index)
            assert torch.allclose(model.predict(state, mine), model.predict(state, plain), atol=1e-6)
            after = model.update(state, mine)
            assert all(torch.allclose(after[k], v, atol=1e-6) for k, v in model.update(state, plain).items())
    seen = []
    monkeypatch.setattr(model, "predict",
                        lambda s, q, *a, f=model.predict, **k: seen.append(type(q)) or f(s, q, *a, **k))
    engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(recs), max_batch=20)
    kit.drain(engine, source)
    assert seen and set(seen) == {Prepared}


def close(a, b, atol: float = 1e-6) -> bool:
    """Equal JSON values, numbers within ``atol`` (batched kernels may round differently by batch size)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], atol) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y, atol) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) <= atol
    return a == b


def test_predictions_keep_per_learner_order(kit):
    recs = kit.stream(n_learners=20, mean_length=10, seed=5)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                             kit.as_records(recs), max_batch=64)
    kit.drain(engine, source)
    order = {}
    for r in recs:
        order.setdefault(r["learner_id"], []).append(r["event_id"])
    got = {}
    for p in kit.outputs(sink, kit.PREDICTIONS):
        got.setdefault(p["learner_id"], []).append(p["event_id"])
        assert p["source"]["topic"] == kit.EVENTS
    assert got == order


def test_step_members_are_predicted_from_the_step_start_across_batches(kit):
    """Three answers sharing an event time: the 2nd and 3rd see none of the step's responses,
    even when each arrives in its own micro-batch."""
    base = {"learner_id": "s", "concept_ids": ["c1"]}
    recs = [dict(base, event_id="a", item_id="q1", response=1, event_time=1000),
            dict(base, event_id="b", item_id="q2", response=0, event_time=2000),
            dict(base, event_id="c", item_id="q3", response=1, event_time=2000),
            dict(base, event_id="d", item_id="q2", response=1, event_time=2000),
            dict(base, event_id="e", item_id="q2", response=1, event_time=3000)]
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkt", items, concepts)
    engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(recs), max_batch=1)
    kit.drain(engine, source)
    p = {x["event_id"]: x["probs"] for x in kit.outputs(sink, kit.PREDICTIONS)}
    flipped = [dict(r, response=1 - r["response"]) if r["event_id"] in "bc" else r for r in recs]
    engine2, source2, sink2 = kit.memory_engine(model, items, concepts, kit.as_records(flipped), max_batch=1)
    kit.drain(engine2, source2)
    q = {x["event_id"]: x["probs"] for x in kit.outputs(sink2, kit.PREDICTIONS)}
    assert q["d"] == p["d"], "a step member saw its step mates' responses"
    assert q["e"] != p["e"], "the next step must see the step's responses"
    ref = kit.offline(model, recs, items, concepts)
    assert all(torch.allclose(torch.tensor(p[k]), ref[k], atol=1e-6) for k in p)


def test_prediction_only_event_changes_nothing_later(kit):
    base = {"learner_id": "u", "concept_ids": ["c1"]}
    recs = [dict(base, event_id=f"e{i}", item_id=f"q{i % 3}", response=i % 2, event_time=1000 * (i + 1))
            for i in range(8)]
    query = dict(base, event_id="ask", item_id="q2", event_time=4500)  # no response
    with_query = recs[:4] + [query] + recs[4:]
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model("dkvmn", items, concepts)
    runs = []
    for stream in (recs, with_query):
        engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(stream), max_batch=3)
        kit.drain(engine, source)
        runs.append({p["event_id"]: p["probs"] for p in kit.outputs(sink, kit.PREDICTIONS)})
    assert "ask" in runs[1]  # the query itself is answered
    assert {k: v for k, v in runs[1].items() if k != "ask"} == runs[0]
    assert engine.cache.get("u").responses == 8 and engine.cache.get("u").events == 9
