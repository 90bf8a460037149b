"""Mastery: a learner's per-concept mastery now (Tracer.mastery) and over its history (mastery_trajectory)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ktstream
from ktstream.data.histories import NO_RESPONSE, Interactions, collate, encode_learner
from ktstream.serving.mastery import mastery_curves
from tests.api.conftest import simulated, tiny


@pytest.mark.parametrize("name,K", [("dkt", 2), ("sakt", 2), ("deep-gpcm", 3)])
def test_the_trajectory_ends_where_the_tracer_is(name, K):
    events = simulated(n_learners=3, mean_length=20, n_categories=K)
    vocab = ktstream.Vocab.build(events)
    model = tiny(name, vocab, K)
    traj = ktstream.mastery_trajectory(model, vocab, events, "u1")
    tracer = ktstream.Tracer(model, vocab)
    tracer.learn_many(sorted(events, key=lambda r: r["event_time"]))
    now = tracer.mastery("u1", traj.concepts)
    assert list(now) == traj.concepts and len(traj.values) == len(traj.events) + 1
    assert np.allclose(list(now.values()), traj.values[-1], atol=1e-6)
    assert traj.now() == pytest.approx(now, abs=1e-6)
    assert ((traj.values >= 0) & (traj.values <= 1)).all()


def test_a_concepts_mastery_is_the_mean_prediction_over_its_probe_items(events, vocab):
    model = tiny("dkt", vocab)
    learner = [r for r in events if r["learner_id"] == "u2"]
    probes = {"c3": ["q5", "q17"]}
    curves, _ = mastery_curves(model, vocab.items, vocab.concepts, learner, probes)
    hist = collate([encode_learner("u2", learner, vocab.items, vocab.concepts)])
    state = model.init_state(1)
    query = Interactions(torch.tensor([vocab.items.encode("q5"), vocab.items.encode("q17")]),
                         torch.tensor([[vocab.concepts.encode("c3")]] * 2), torch.full((2,), NO_RESPONSE),
                         torch.zeros(2, dtype=torch.float64))
    with torch.no_grad():
        for t in range(len(learner) + 1):
            if t:
                state = model.update(state, hist.at(t - 1))
            both = {k: v.expand(2, *v.shape[1:]) for k, v in state.items()}
            assert curves[t, 0] == pytest.approx(float(model.predict(both, query)[:, 1].mean()), abs=1e-6)


def test_trajectory_defaults_and_frame(events, vocab):
    traj = ktstream.mastery_trajectory(tiny("dkt", vocab), vocab, events, "u0")
    practised = {c for r in traj.events for c in r["concept_ids"]}
    assert set(traj.concepts) == practised and traj.theta is None
    pytest.importorskip("pandas")
    table = traj.to_frame()
    assert table.index.name == "position" and list(table.columns) == traj.concepts
    assert len(table) == len(traj.events) + 1


def test_a_learner_with_no_history_has_the_models_prior(events, vocab):
    model = tiny("dkt", vocab)
    tracer = ktstream.Tracer(model, vocab)
    traj = ktstream.mastery_trajectory(model, vocab, events, "u0", concepts=["c1", "c2"])
    assert np.allclose(list(tracer.mastery("someone new", ["c1", "c2"]).values()), traj.values[0], atol=1e-6)
    with pytest.raises(ValueError, match="no events of learner"):
        ktstream.mastery_trajectory(model, vocab, events, "nobody")
