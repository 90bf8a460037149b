"""The probe histories and `path_equivalence`: every path that produces a reported number is checked, and a
path that predicts a step from a state holding its step mates' responses is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.data.histories import LearnerHistory, collate
from ktstream.leakage import GateConfig
from ktstream.leakage.paths import path_equivalence
from ktstream.leakage.probe import private_copy, probe_length
from ktstream.leakage.probe_data import has_clocks, has_steps, probe_histories
from ktstream.models import create, family
from tests.conftest import random_learner

N_ITEMS, N_CONCEPTS = 30, 12
CFG = GateConfig(n_learners=4, max_length=60)


def _clockless(rng, n) -> LearnerHistory:
    """An ASSISTments-like learner: no clock, no steps, short."""
    h = random_learner(rng, n, N_ITEMS, N_CONCEPTS, 2, step_prob=0.0)
    return LearnerHistory(h.learner_id, h.items, h.concepts, h.responses, np.full(n, np.nan), np.arange(n),
                          h.event_ids)


def test_short_clockless_data_is_lengthened_and_given_steps_and_clocks():
    rng = np.random.default_rng(0)
    pool = [_clockless(rng, n) for n in (12, 30, 7, 25, 18)]
    model = create("sakt", n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family("sakt").tiny_config)
    length = probe_length(model, 20)
    assert length >= 3 * model.receptive_field() > 20  # raised past the longest learner of the data
    learners, notes = probe_histories(pool, 3, length, seed=0)
    assert [len(h) for h in learners] == [length, length + 3, length + 6]
    assert has_steps(learners) and has_clocks(learners) and notes["continued"] == 3
    for h in learners:
        assert np.all(np.diff(h.times) >= 0) and len(set(h.event_ids)) == len(h)
        first = h.step_start == np.arange(len(h))
        assert np.all(h.times == h.times[h.step_start]) and not first.all()  # step mates share a time
    assert "seed 0" in notes["steps"] and "seed 0" in notes["clocks"]


def test_data_with_steps_and_clocks_is_probed_as_given():
    rng = np.random.default_rng(1)
    pool = [random_learner(rng, 80, N_ITEMS, N_CONCEPTS, 2, step_prob=0.3, learner_id=f"u{i}") for i in range(4)]
    learners, notes = probe_histories(pool, 2, 50, seed=0)
    assert notes["steps"] == notes["clocks"] == "from the data" and notes["continued"] == 0
    for h in learners:
        orig = next(p for p in pool if p.learner_id == h.learner_id)
        assert np.array_equal(h.step_start, orig.step_start[: len(h)]) and np.array_equal(h.times, orig.times[: len(h)])


@pytest.fixture(scope="module")
def stepped():
    rng = np.random.default_rng(2)
    return [random_learner(rng, n, N_ITEMS, N_CONCEPTS, 2, step_prob=0.4, learner_id=f"u{i}")
            for i, n in enumerate([70, 64, 75, 58])]


def _model(name):
    torch.manual_seed(0)
    return private_copy(create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family(name).tiny_config), "fp64")


@torch.no_grad()
def straddling_predict_histories(model, histories, batch_size=64, device=None, chunk=4000):
    """The trainer's evaluation path as it must not be: windows of ``chunk`` positions, each predicted from
    the state the previous one carried, including the positions of a step that began in the previous window
    (whose carried state holds their step mates' responses)."""
    model.eval()
    batch = collate(list(histories))
    T, state, parts = batch.shape[1], None, []
    for start in range(0, T, chunk):
        log_probs, state = model(batch.window(start, min(T, start + chunk)), state)
        parts.append(log_probs.exp())
    probs = torch.cat(parts, 1).numpy()
    return [probs[b, : len(h)] for b, h in enumerate(histories)]


def test_windows_that_begin_inside_a_step_are_named(stepped, monkeypatch):
    model = _model("dkt")
    monkeypatch.setattr("ktstream.leakage.paths.predict_histories", straddling_predict_histories)
    r = path_equivalence(model, stepped, CFG)
    assert r.status == "fail" and r.detail.startswith("predict_histories"), r
    per_path = r.extras["per_path"]
    assert per_path["predict_histories"] > r.bound
    assert all(v <= r.bound for k, v in per_path.items() if k != "predict_histories"), per_path


def test_an_engine_that_predicts_a_step_from_the_current_state_is_named(stepped, monkeypatch):
    from ktstream.core import LearnerState

    model = _model("dkt")
    monkeypatch.setattr(LearnerState, "query_state", lambda self, key: self.state)  # step start forgotten
    monkeypatch.setattr("ktstream.leakage.paths.predict_histories", _serving_predictions)
    r = path_equivalence(model, stepped, CFG)
    assert r.status == "fail" and r.detail.startswith("engine"), r
    assert r.extras["per_path"]["engine"] > r.bound


def _serving_predictions(model, histories, batch_size=64, device=None, chunk=4000):
    """predict_histories by the serving path: keeps the trainer's own windows out of the engine test."""
    from ktstream.models.stepwise import predict_stepwise

    probs = predict_stepwise(model, collate(list(histories)))[0].numpy()
    return [probs[b, : len(h)] for b, h in enumerate(histories)]


@pytest.mark.parametrize("name", ["dkt", "sakt"])
def test_every_path_agrees_with_serving_when_none_leaks(name, stepped):
    r = path_equivalence(_model(name), stepped, CFG)
    assert r.status == "pass", r
    assert set(r.extras["per_path"]) == {"forward_carried", "predict_histories", "windows_train", "engine"}
