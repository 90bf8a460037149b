"""irt-pfa (ktstream/models/logistic.py): the state holds exactly the history's practice counts, the
ability is the weighted overall counts, and a fit on data simulated by a PFA recovers its signs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ktstream.data.histories import NO_RESPONSE, LearnerHistory, collate
from ktstream.models import create
from ktstream.models.stepwise import predict_stepwise

N_ITEMS, N_CONCEPTS = 30, 12


def expected_counts(learners, n_concepts: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Per learner: per concept [successes, failures] and overall, counted from the raw histories (a
    response k is k / (K - 1) success; a concept listed twice counts once; no concept: column 0)."""
    counts = np.zeros((len(learners), n_concepts, 2))
    overall = np.zeros((len(learners), 2))
    for b, h in enumerate(learners):
        for t in range(len(h)):
            r = h.responses[t]
            if r < 0:
                continue
            credit = np.array([r / (K - 1), 1 - r / (K - 1)])
            for c in (set(int(x) for x in h.concepts[t] if x > 0) or {0}):
                counts[b, c] += credit
            overall[b] += credit
    return counts, overall


@pytest.mark.parametrize("K", [2, 4])
def test_the_state_holds_the_counts_of_the_history(K, make_histories):
    learners, _ = make_histories([40, 7, 25], N_ITEMS, N_CONCEPTS, K, seed=3)
    rng = np.random.default_rng(0)
    for h in learners:  # prediction requests count nothing
        h.responses = np.where(rng.random(len(h)) < 0.2, NO_RESPONSE, h.responses)
    hist = collate(learners)
    model = create("irt-pfa", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=K, init_scale=0.5).eval()
    counts, overall = expected_counts(learners, N_CONCEPTS, K)
    with torch.no_grad():
        _, trained = model(hist)
    _, served = predict_stepwise(model, hist)
    for state in (trained, served):
        assert np.allclose(state["counts"].numpy(), counts, atol=1e-5)
        assert np.allclose(state["overall"].numpy(), overall, atol=1e-5)
    assert counts[:, 2:].sum() > 50 and counts[:, 0].sum() > 0  # the histories have tagged and untagged items


@torch.no_grad()
def test_ability_is_the_weighted_log_overall_counts(make_histories):
    _, hist = make_histories([30, 12], N_ITEMS, N_CONCEPTS, 2, seed=5)
    model = create("irt-pfa", n_items=N_ITEMS, n_concepts=N_CONCEPTS, init_scale=0.5).eval()
    _, state = predict_stepwise(model, hist)
    _, extras = model.predict(state, hist.at(3), describe=True)
    w_s, w_f = model.learner.tolist()
    s, f = state["overall"].unbind(-1)
    assert torch.allclose(extras["ability"][:, 0], w_s * torch.log1p(s) + w_f * torch.log1p(f), atol=1e-6)
    assert extras["mastery"].shape == (2, N_CONCEPTS)
    without = create("irt-pfa", n_items=N_ITEMS, n_concepts=N_CONCEPTS, ability=False, init_scale=0.5).eval()
    assert "ability" not in without.predict(state, hist.at(3), describe=True)[1]


def simulate_pfa(n_learners: int, length: int, b: np.ndarray, gamma: float, rho: float, seed: int = 0):
    """Learners answering random items (item i tagged with concept 2 + i % 4) under a PFA with log
    counts: logit = -b_i + gamma log(1 + s_c) + rho log(1 + n_c)."""
    rng = np.random.default_rng(seed)
    out = []
    for u in range(n_learners):
        items = rng.integers(2, len(b), size=length)
        concepts = 2 + items % 4
        s, n = np.zeros(6), np.zeros(6)
        resp = np.zeros(length, dtype=np.int64)
        for t, (i, c) in enumerate(zip(items, concepts)):
            x = -b[i] + gamma * math.log1p(s[c]) + rho * math.log1p(n[c])
            resp[t] = rng.random() < 1 / (1 + math.exp(-x))
            s[c] += resp[t]
            n[c] += 1 - resp[t]
        out.append(LearnerHistory(f"u{u}", items.astype(np.int64), concepts.reshape(-1, 1).astype(np.int64), resp,
                                  np.full(length, np.nan), np.arange(length), [""] * length))
    return out


def test_a_fit_recovers_the_signs_of_the_practice_effects_and_the_item_difficulties():
    rng = np.random.default_rng(7)
    b = rng.normal(0.0, 1.0, size=40)
    hist = collate(simulate_pfa(1500, 30, b, gamma=0.6, rho=-0.4, seed=1))
    torch.manual_seed(0)
    model = create("irt-pfa", n_items=40, n_concepts=6, ability=False)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(150):
        opt.zero_grad()
        log_probs, _ = model(hist)
        loss = -log_probs.gather(-1, hist.responses.clamp(min=0).unsqueeze(-1)).squeeze(-1)[hist.mask].mean()
        loss.backward()
        opt.step()
    coef = model.coefficients()
    for c in range(2, 6):
        gamma, rho = coef["concepts"][c]["gamma"], coef["concepts"][c]["rho"]
        assert gamma > 0.3 and rho < -0.1, (c, gamma, rho)
    fitted = np.array([coef["difficulty"][i] for i in range(2, 40)])
    assert np.corrcoef(fitted, b[2:])[0, 1] > 0.9


@torch.no_grad()
def test_described_mastery_is_the_concepts_own_prediction_whatever_max_values(make_histories):
    _, hist = make_histories([20], N_ITEMS, N_CONCEPTS, 2, seed=6)
    model = create("irt-pfa", n_items=N_ITEMS, n_concepts=N_CONCEPTS, init_scale=0.5).eval()
    _, state = predict_stepwise(model, hist)
    _, extras = model.predict(state, hist.at(3), describe=True, max_values=4)
    concept = int(hist.concepts[0, 3, 0]) or 0
    alone = hist.at(3)
    alone.items = torch.zeros_like(alone.items)  # the padding item: difficulty row 0
    alone.concepts = torch.tensor([[concept]])
    with torch.no_grad():
        model.difficulty.weight[0] = 0.0
        p = model.predict(state, alone)[0, 1]
    assert extras["mastery"].shape == (1, N_CONCEPTS)
    assert extras["mastery"][0, concept].item() == pytest.approx(p.item(), abs=1e-6)
