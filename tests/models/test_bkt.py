"""BKT (ktstream/models/bkt.py): it recovers the parameters of a simulated BKT, mastery moves the way
the model says it does, multi-concept items update each of their concepts once."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ktstream.data.histories import Interactions, LearnerHistory, collate
from ktstream.models import create
from ktstream.models.bkt import binomial_emission

TRUE = {2: {"prior": 0.3, "learn": 0.15, "guess": 0.2, "slip": 0.1},
        3: {"prior": 0.6, "learn": 0.05, "guess": 0.3, "slip": 0.2}}
TOLERANCE = 0.05  # absolute, on each probability, with 2,000 learners of 40 attempts


def simulate_bkt(n_learners: int, length: int, seed: int = 0) -> list[LearnerHistory]:
    """Learners practising concepts 2 and 3 (drawn at random per attempt) under a BKT with ``TRUE``."""
    rng = np.random.default_rng(seed)
    out = []
    for u in range(n_learners):
        mastered = {c: rng.random() < p["prior"] for c, p in TRUE.items()}
        concepts = rng.choice(list(TRUE), size=length)
        resp = np.zeros(length, dtype=np.int64)
        for t, c in enumerate(concepts):
            p = TRUE[c]
            correct = 1 - p["slip"] if mastered[c] else p["guess"]
            resp[t] = rng.random() < correct
            mastered[c] = mastered[c] or rng.random() < p["learn"]
        out.append(LearnerHistory(f"u{u}", np.full(length, 2, dtype=np.int64), concepts.reshape(-1, 1).astype(np.int64),
                                  resp, np.full(length, np.nan), np.arange(length), [""] * length))
    return out


def fit_full_batch(model, hist, steps: int = 150, lr: float = 0.1) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    m = hist.mask
    for _ in range(steps):
        opt.zero_grad()
        log_probs, _ = model(hist)
        nll = -log_probs.gather(-1, hist.responses.clamp(min=0).unsqueeze(-1)).squeeze(-1)[m].mean()
        nll.backward()
        opt.step()


def test_recovers_the_parameters_of_a_simulated_bkt():
    torch.manual_seed(0)
    hist = collate(simulate_bkt(2000, 40, seed=1))
    model = create("bkt", n_items=3, n_concepts=4)
    fit_full_batch(model, hist)
    fitted = model.params()
    for c, truth in TRUE.items():
        for k, v in truth.items():
            assert abs(fitted[c][k] - v) < TOLERANCE, f"concept {c} {k}: fitted {fitted[c][k]:.3f}, true {v}"
        assert fitted[c]["forget"] == 0.0


def query(concepts, response=-1, item=2) -> Interactions:
    return Interactions(torch.tensor([item]), torch.tensor([concepts]), torch.tensor([response]),
                        torch.tensor([math.nan], dtype=torch.float64))


def bkt(with_forget: bool, **probs: float):
    """A BKT whose every concept has ``probs`` (prior, learn, guess, slip, forget)."""
    model = create("bkt", n_items=5, n_concepts=6, forget=with_forget)
    base = {"prior": 0.4, "learn": 0.2, "guess": 0.2, "slip": 0.1, "forget": 0.3, **probs}
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    cols = [logit(base["prior"]), logit(base["learn"]), logit(2 * base["guess"]), logit(2 * base["slip"])]
    cols += [logit(base["forget"])] if with_forget else []
    with torch.no_grad():
        model.logits.copy_(torch.tensor(cols).repeat(6, 1))
    return model.eval()


@torch.no_grad()
def test_mastery_rises_after_a_correct_answer_and_less_after_a_wrong_one():
    model = bkt(False)
    state = model.init_state(1)
    right = model.update(state, query([2], 1))["mastery"][0]
    wrong = model.update(state, query([2], 0))["mastery"][0]
    assert right[2] > state["mastery"][0, 2] + 0.2 and wrong[2] < right[2] - 0.3
    # the closed form of one step: posterior given a correct answer, then learning
    post = 0.4 * 0.9 / (0.4 * 0.9 + 0.6 * 0.2)
    assert right[2].item() == pytest.approx(post + (1 - post) * 0.2, abs=1e-6)
    assert torch.equal(right[[0, 1, 3, 4, 5]], state["mastery"][0, [0, 1, 3, 4, 5]])  # other concepts untouched
    p_before = model.predict(state, query([2]))[0, 1]
    p_after = model.predict({"mastery": right.unsqueeze(0)}, query([2]))[0, 1]
    assert p_after > p_before


def test_evidence_the_mastery_nearly_rules_out_moves_it_as_bayes_rule_says_and_trains_finite():
    """P(L) near 0 and guess near 0: a right answer is near-certain evidence of mastery, so the posterior is
    near 1 (P(L) is kept inside MASTERY_RANGE; at the edge the posterior's denominator fell under its floor,
    which gave a posterior of 0.09 here, and NaN gradients when training on long histories)."""
    model = bkt(False, prior=1e-13, guess=1e-18, slip=1e-18)
    right = model.update(model.init_state(1), query([2], 1))["mastery"][0, 2]
    assert right > 0.99
    model.train()  # one learner: 300 right answers on concept 2, then wrong ones the mastery rules out
    n = 320
    resp = np.array([1] * 300 + [0] * (n - 300), dtype=np.int64)
    hist = collate([LearnerHistory("u", np.full(n, 2, dtype=np.int64), np.full((n, 1), 2, dtype=np.int64), resp,
                                   np.full(n, np.nan), np.arange(n), [""] * n)])
    log_probs, state = model(hist)
    nll = -log_probs.gather(-1, hist.responses.unsqueeze(-1)).squeeze(-1).mean()
    nll.backward()
    assert torch.isfinite(nll) and torch.isfinite(model.logits.grad).all(), model.logits.grad
    assert ((state["mastery"] > 0) & (state["mastery"] < 1)).all()


@torch.no_grad()
def test_forgetting_lowers_mastery_between_attempts():
    keep, forget = bkt(False), bkt(True, forget=0.3)
    assert keep.params()[2]["forget"] == 0.0 and forget.params()[2]["forget"] == pytest.approx(0.3, abs=1e-6)
    a, b = keep.init_state(1), forget.init_state(1)
    for _ in range(6):  # a run of correct answers
        a, b = keep.update(a, query([2], 1)), forget.update(b, query([2], 1))
    assert a["mastery"][0, 2] > 0.99
    assert b["mastery"][0, 2] < 0.75  # at most 1 - F after any attempt
    assert b["mastery"][0, 2] == pytest.approx(forget.update(b, query([2], 1))["mastery"][0, 2].item(), abs=0.02)


@torch.no_grad()
def test_a_multi_concept_item_updates_each_concept_once_and_predicts_their_mean():
    model = create("bkt", n_items=5, n_concepts=6, init_scale=1.0).eval()
    state = model.init_state(1)
    both = model.update(state, query([2, 4], 1))["mastery"]
    twice = model.update(state, query([2, 4, 2], 1))["mastery"]
    alone = {c: model.update(state, query([c], 1))["mastery"][0, c] for c in (2, 4)}
    assert torch.equal(both, twice)
    assert torch.allclose(both[0, [2, 4]], torch.stack([alone[2], alone[4]]), atol=1e-7)
    assert torch.equal(both[0, [0, 1, 3, 5]], state["mastery"][0, [0, 1, 3, 5]])
    mean = (model.predict(state, query([2])) + model.predict(state, query([4]))) / 2
    assert torch.allclose(model.predict(state, query([2, 4, 4])), mean, atol=1e-7)


@torch.no_grad()
def test_an_item_without_concepts_is_traced_on_its_own_pseudo_concept():
    model = create("bkt", n_items=5, n_concepts=6, init_scale=1.0).eval()
    state = model.init_state(1)
    after = model.update(state, query([0, 0], 1))["mastery"]
    assert after[0, 0] != state["mastery"][0, 0] and torch.equal(after[0, 1:], state["mastery"][0, 1:])


def test_binomial_emissions_are_distributions_and_the_classic_ones_at_two_categories():
    p = torch.tensor([0.1, 0.5, 0.93])
    assert torch.allclose(binomial_emission(p, 2), torch.stack([1 - p, p], -1))
    for K in (3, 4, 6):
        e = binomial_emission(p, K)
        assert torch.allclose(e.sum(-1), torch.ones(3), atol=1e-6)
        assert torch.allclose((e * torch.arange(K)).sum(-1), (K - 1) * p, atol=1e-5)  # mean (K-1) p


def test_guess_and_slip_stay_below_one_half_whatever_the_logits():
    model = create("bkt", n_items=5, n_concepts=6)
    with torch.no_grad():
        model.logits.fill_(40.0)
    for p in model.params().values():
        assert p["guess"] <= 0.5 and p["slip"] <= 0.5 and p["prior"] <= 1.0


@torch.no_grad()
def test_described_mastery_is_every_concepts_p_of_l_whatever_max_values():
    """The engine reports each event's own concepts out of it (ktstream.engine.messages), so it stays
    in the extras even when the concept vocabulary is larger than ``max_values``."""
    model = create("bkt", n_items=5, n_concepts=6, init_scale=1.0).eval()
    state = model.update(model.init_state(1), query([2, 4], 1))
    _, extras = model.predict(state, query([3]), describe=True, max_values=4)
    assert torch.equal(extras["mastery"], state["mastery"])
