"""The tracer: River's predict_one / learn_one / predict_many / learn_many on the engine's serving path.

Its predictions over learners' histories equal the offline serving pass (``predict_stepwise``) within
1e-6 and the training path's forward within 1e-5, for every registered family and for a trained model;
steps are predicted from their start; a prediction changes no state; late and repeated events raise and
apply nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ktstream
from ktstream.data.histories import collate, encode
from ktstream.models import names
from ktstream.models.stepwise import predict_stepwise
from tests.api.conftest import simulated, tiny


def references(model, vocab, events) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each event's category probabilities from the offline serving pass and from the forward, by event id."""
    histories = encode(events, vocab.items, vocab.concepts)
    batch = collate(histories)
    served, _ = predict_stepwise(model, batch)
    with torch.no_grad():
        forward = model(batch)[0].exp()
    pick = lambda probs: {e: probs[b, t].double().numpy() for b, h in enumerate(histories)  # noqa: E731
                          for t, e in enumerate(h.event_ids)}
    return pick(served), pick(forward)


def in_time_order(events: list[dict]) -> list[dict]:
    """Learners interleaved as a live platform sends them: by event time (each learner's order kept)."""
    return sorted(events, key=lambda r: r["event_time"])


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("name", names())
def test_tracer_matches_serving_pass_and_forward(name, K):
    events = simulated(n_learners=4, mean_length=20, n_categories=K, requests=0.1)
    vocab = ktstream.Vocab.build(events)
    model = tiny(name, vocab, K)
    served, forward = references(model, vocab, events)
    one = ktstream.Tracer(model, vocab)
    got = {}
    for r in in_time_order(events):
        got[r["event_id"]] = np.atleast_1d(one.predict_one(r))
        one.learn_one(r)
    many = ktstream.Tracer(model, vocab).learn_many(in_time_order(events))
    for r, p in zip(in_time_order(events), many):
        ref_s, ref_f = served[r["event_id"]], forward[r["event_id"]]
        want_s, want_f = (ref_s[1], ref_f[1]) if K == 2 else (ref_s, ref_f)
        assert np.allclose(got[r["event_id"]], want_s, atol=1e-6), (name, r["event_id"])
        assert np.allclose(got[r["event_id"]], want_f, atol=1e-5), (name, r["event_id"])
        assert np.allclose(p, want_s, atol=1e-6), (name, r["event_id"])


def test_trained_model_tracer_matches_forward():
    events = simulated(n_learners=30, mean_length=20, seed=5)
    data = ktstream.Dataset.of(events).split_by_learner(test=0.2, seed=1)
    trained = ktstream.train("dkt", data, epochs=2, model_args={"dim": 16, "hidden": 16}, progress=False)
    _, forward = references(trained.model, trained.vocab, data.test)
    tracer = trained.tracer()
    ordered = in_time_order(data.test)
    got = tracer.learn_many(ordered)
    want = np.array([forward[r["event_id"]][1] for r in ordered])
    assert np.abs(got - want).max() < 1e-5
    assert got.std() > 0.01  # a trained model, not a constant


def test_a_step_is_predicted_from_its_start(events, vocab):
    model = tiny("dkt", vocab)
    tracer = ktstream.Tracer(model, vocab)
    t0 = 1_800_000_000_000
    first = {"learner_id": "s", "item_id": "q1", "concept_ids": ["c1"], "event_time": t0, "response": 1}
    second = {"learner_id": "s", "item_id": "q2", "concept_ids": ["c2"], "event_time": t0, "response": 0}
    before = tracer.predict_one(second)
    tracer.learn_one(first)
    assert tracer.predict_one(second) == pytest.approx(before, abs=1e-7)  # same step: from the step's start
    assert tracer.predict_one({**second, "event_time": t0 + 1}) != pytest.approx(before, abs=1e-4)  # next step


def test_a_prediction_changes_no_state(events, vocab):
    tracer = ktstream.Tracer(tiny("sakt", vocab), vocab)
    learner = [r for r in in_time_order(events) if r["learner_id"] == "u0"]
    tracer.learn_many(learner[:10])
    query = learner[10]
    first = tracer.predict_one(query)
    tracer.predict_many(learner[11:])
    assert tracer.predict_one(query) == first
    assert tracer.predict_one({**query, "learner_id": "nobody"}) == pytest.approx(
        ktstream.Tracer(tracer.model, vocab).predict_one(query))
    assert tracer.learners == ["u0"]  # predictions for new learners keep no state


def test_forget_starts_a_learner_afresh(events, vocab):
    tracer = ktstream.Tracer(tiny("dkt", vocab), vocab)
    learner = [r for r in in_time_order(events) if r["learner_id"] == "u1"]
    fresh = tracer.predict_one(learner[5])
    tracer.learn_many(learner[:5])
    assert tracer.predict_one(learner[5]) != pytest.approx(fresh)
    tracer.forget("u1")
    assert tracer.predict_one(learner[5]) == pytest.approx(fresh) and tracer.learners == []


def test_predict_many_is_predict_one_of_each(events, vocab):
    tracer = ktstream.Tracer(tiny("dkvmn", vocab), vocab)
    ordered = in_time_order(events)
    tracer.learn_many(ordered[:60])
    queries = ordered[60:90]
    assert np.allclose(tracer.predict_many(queries), [tracer.predict_one(q) for q in queries], atol=1e-7)


def test_tables_are_read_as_event_lists(events, vocab):
    pd = pytest.importorskip("pandas")
    model = tiny("dkt", vocab)
    ordered = in_time_order(events)[:40]
    table = pd.DataFrame(ordered).assign(event_time=lambda d: pd.to_datetime(d["event_time"], unit="ms", utc=True))
    from_list = ktstream.Tracer(model, vocab).learn_many(ordered)
    assert np.allclose(ktstream.Tracer(model, vocab).learn_many(table), from_list)
    import pyarrow as pa
    assert np.allclose(ktstream.Tracer(model, vocab).learn_many(pa.Table.from_pylist(ordered)), from_list)


def test_ordinal_predict_one_is_a_distribution():
    events = simulated(n_categories=4)
    vocab = ktstream.Vocab.build(events)
    tracer = ktstream.Tracer(tiny("deep-gpcm", vocab, 4), vocab)
    p = tracer.predict_one(events[0])
    assert p.shape == (4,) and p.sum() == pytest.approx(1.0, abs=1e-6)
    assert tracer.predict_many(events[:5]).shape == (5, 4)


def test_late_and_repeated_events_raise_and_apply_nothing(vocab):
    tracer = ktstream.Tracer(tiny("dkt", vocab), vocab)
    base = {"learner_id": "a", "item_id": "q1", "concept_ids": ["c1"], "response": 1}
    tracer.learn_one({**base, "event_id": "e1", "event_time": 2000})
    probe = {**base, "item_id": "q2", "event_time": 3000}
    before = tracer.predict_one(probe)
    with pytest.raises(ktstream.TracerError, match="older than"):
        tracer.learn_many([{**base, "event_id": "e2", "event_time": 2500}, {**base, "event_id": "e3",
                                                                             "event_time": 1000}])
    with pytest.raises(ktstream.TracerError, match="learned already"):
        tracer.learn_one({**base, "event_id": "e1", "event_time": 2000})
    assert tracer.predict_one(probe) == before  # e2 was not learned either
    lenient = ktstream.Tracer(tracer.model, vocab, late="apply")
    lenient.learn_one({**base, "event_time": 2000})
    lenient.learn_one({**base, "event_time": 1000})
    assert lenient.predict_one(probe) != pytest.approx(ktstream.Tracer(tracer.model, vocab).predict_one(probe))


def test_arguments_are_checked(vocab):
    model = tiny("dkt", vocab)
    with pytest.raises(ValueError, match="late must be one of"):
        ktstream.Tracer(model, vocab, late="drop")
    tracer = ktstream.Tracer(model, vocab)
    with pytest.raises(ValueError, match="item_id"):
        tracer.predict_one({"learner_id": "a"})
    with pytest.raises(ValueError, match="time zone"):
        import datetime
        tracer.predict_one({"learner_id": "a", "item_id": "q1", "event_time": datetime.datetime(2024, 1, 1)})
