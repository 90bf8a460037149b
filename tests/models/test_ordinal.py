"""Ordinal knowledge tracing: Deep-GPCM / CORAL heads, ordinal embeddings, losses, metrics, derived data.

The contract suite (test_contract.py) already runs every registered ordinal
family; here: the IRT identities, constraints that must hold for any weights,
option combinations the contract suite does not build, and the loss and
metric figures against reference implementations.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score, roc_auc_score
from sklearn.utils.class_weight import compute_class_weight

from connectors.datasets.ordinal import (assistments_category, assistments_ordinal_events,
                                        datashop_category, datashop_ordinal_events)
from connectors.datasets.stats import ConversionStats
from ktstream.data.histories import group_by_learner
from ktstream.scoring.ordinal import (binary_auc, calibration, ordinal_report, quadratic_weighted_kappa,
                                                 spearman)
from ktstream.models import create
from ktstream.models.embeddings import InteractionEmbedding
from ktstream.models.ordinal import (CoralHead, GPCMHead, IRTHead, OrdinalDKVMN, coral_log_probs, gpcm_log_probs,
                                     irt_2pl_log_probs)
from ktstream.models.ordinal_embeddings import CausalRefiner, OrdinalInteractionEmbedding, response_weights
from ktstream.models.stepwise import predict_stepwise
from ktstream.schema import Event
from ktstream.training import ordinal_losses as L
from tests.conftest import require_dataset

TINY = OrdinalDKVMN.tiny_config
N_ITEMS, N_CONCEPTS = 30, 12


def _scramble(module: torch.nn.Module, seed: int, scale: float = 3.0) -> None:
    """Random weights far from the initialisation (large, both signs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


# -- IRT identities and constraints --------------------------------------------------------------
def test_gpcm_with_two_categories_is_2pl():
    g = torch.Generator().manual_seed(0)
    theta, alpha, beta = torch.randn(500, generator=g) * 3, torch.rand(500, generator=g) * 3, torch.randn(500, generator=g)
    gpcm = gpcm_log_probs(theta, alpha, beta.unsqueeze(-1)).exp()
    twopl = torch.sigmoid(alpha * (theta - beta))
    assert torch.allclose(gpcm[:, 1], twopl, atol=1e-6)
    assert torch.allclose(irt_2pl_log_probs(theta, alpha, beta).exp(), gpcm, atol=1e-6)


def test_binary_head_equals_gpcm_head_with_k2_for_identical_parameters():
    torch.manual_seed(1)
    gpcm, binary = GPCMHead(8, 6, 2, ability_scale=2.0), IRTHead(8, 6, ability_scale=2.0)
    _scramble(gpcm, 1, scale=1.0)
    binary.load_state_dict(gpcm.state_dict())
    summary, key = torch.randn(4, 7, 8), torch.randn(4, 7, 6)
    assert torch.allclose(gpcm(summary, key).exp(), binary(summary, key).exp(), atol=1e-6)


@pytest.mark.parametrize("K", [3, 5, 10])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_betas_ordered_and_alpha_positive_for_random_weights(K, seed, make_histories):
    torch.manual_seed(seed)
    model = create("deep-gpcm", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=K, **TINY).eval()
    _scramble(model.head, seed)
    _, hist = make_histories([12, 7], N_ITEMS, N_CONCEPTS, K, seed=seed)
    _, state = predict_stepwise(model, hist)
    with torch.no_grad():
        d = model.predict(state, hist.at(5), describe=True)[1]
    assert d["betas"].shape == (2, K - 1)
    assert bool((d["betas"].diff(dim=-1) > 0).all()), f"thresholds not increasing: {d['betas']}"
    assert bool((d["alpha"] > 0).all())


def test_describe_matches_predict(make_histories):
    model = create("deep-gpcm", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=4, **TINY).eval()
    _, hist = make_histories([10, 10, 4], N_ITEMS, N_CONCEPTS, 4, seed=3)
    _, state = predict_stepwise(model, hist)
    with torch.no_grad():
        q = hist.at(2)
        probs, d = model.predict(state, q, describe=True)
    assert set(d) >= {"theta", "alpha", "betas", "expected_score"}
    assert torch.allclose(probs, gpcm_log_probs(d["theta"], d["alpha"], d["betas"]).exp(), atol=1e-6)
    assert torch.allclose(d["expected_score"], (probs * torch.arange(4.0)).sum(-1), atol=1e-6)


def test_anchored_ability_is_zero_for_a_new_learner_on_every_item(make_histories):
    kw = dict(n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=4, **TINY)
    _, hist = make_histories([5, 5, 5], N_ITEMS, N_CONCEPTS, 4, seed=10)
    for name in ("deep-gpcm", "deep-gpcm-blend"):
        torch.manual_seed(11)
        model = create(name, **kw).eval()
        with torch.no_grad():
            fresh = model.predict(model.init_state(3), hist.at(2), describe=True)[1]["theta"]
            _, state = model(hist)
            later = model.predict(state, hist.at(2), describe=True)[1]["theta"]
        assert torch.allclose(fresh, torch.zeros(3), atol=1e-6)
        assert later.abs().max() > 1e-4
    torch.manual_seed(11)
    free = create("deep-gpcm", anchored=False, **kw).eval()
    with torch.no_grad():
        assert free.predict(free.init_state(3), hist.at(2), describe=True)[1]["theta"].abs().max() > 1e-4


def test_unanchored_variant_keeps_train_serve_equivalence(make_histories):
    torch.manual_seed(12)
    model = create("deep-gpcm-blend", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=3, anchored=False,
                   attention_window=2, **TINY).eval()
    _, hist = make_histories([19, 4, 12], N_ITEMS, N_CONCEPTS, 3, seed=13)
    with torch.no_grad():
        batch, _ = model(hist)
    served, _ = predict_stepwise(model, hist)
    assert torch.allclose(served[hist.mask], batch.exp()[hist.mask], atol=1e-5)


@pytest.mark.parametrize("K", [2, 3, 6])
def test_coral_probabilities_valid_and_rank_consistent(K):
    head = CoralHead(8, K)
    _scramble(head, K, scale=2.0)
    summary = torch.randn(300, 8)
    probs = head(summary, None).exp()  # (N, K)
    assert bool((probs >= 0).all()) and torch.allclose(probs.sum(-1), torch.ones(300), atol=1e-5)
    tau = head.thresholds()
    assert bool((tau.diff() > 0).all()), "CORAL thresholds must be ordered"
    above = 1 - probs.cumsum(-1)[:, :-1]  # P(Y > k), k = 0..K-2
    assert bool((above.diff(dim=-1) <= 1e-6).all()), "P(Y > k) must not increase with k"
    direct = torch.sigmoid(head.cumulative_logits(summary))
    unclamped = (probs > 1e-5).all(-1)
    assert torch.allclose(above[unclamped], direct[unclamped], atol=1e-5)


def test_coral_clamps_and_renormalises_degenerate_differences():
    logits = torch.tensor([[30.0, 30.0, -30.0]])  # P(Y>0) = P(Y>1): category 1 has probability ~0
    probs = coral_log_probs(logits).exp()
    assert bool((probs > 0).all()) and torch.allclose(probs.sum(-1), torch.ones(1))


def test_blend_describe_has_both_heads_and_gate(make_histories):
    model = create("deep-gpcm-blend", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=3, **TINY).eval()
    _, hist = make_histories([6, 9], N_ITEMS, N_CONCEPTS, 3, seed=4)
    _, state = predict_stepwise(model, hist)
    with torch.no_grad():
        d = model.predict(state, hist.at(1), describe=True)[1]
    assert {"theta", "alpha", "betas", "tau", "gpcm_weight", "expected_score"} <= set(d)
    assert bool(((d["gpcm_weight"] > 0) & (d["gpcm_weight"] < 1)).all())


# -- ordinal embeddings and option combinations ------------------------------------------------
def test_one_hot_ordinal_embedding_equals_the_plain_interaction_embedding():
    torch.manual_seed(5)
    plain = InteractionEmbedding(N_ITEMS, N_CONCEPTS, 4, 6)
    ordinal = OrdinalInteractionEmbedding(N_ITEMS, N_CONCEPTS, 4, 6, mode="one_hot")
    with torch.no_grad():
        ordinal.concept.copy_(plain.concept.weight)
        ordinal.item.copy_(plain.item.weight)
    items, concepts = torch.randint(2, N_ITEMS, (3, 5)), torch.randint(0, N_CONCEPTS, (3, 5, 2))
    responses = torch.randint(0, 4, (3, 5))
    assert torch.allclose(ordinal(items, concepts, responses), plain(items, concepts, responses), atol=1e-6)


def test_response_weights():
    r = torch.tensor([0, 1, 3])
    assert torch.equal(response_weights(r, 4, "one_hot"), F.one_hot(r, 4).float())
    tri = response_weights(r, 4, "linear_decay")
    expected = torch.tensor([[1, 2 / 3, 1 / 3, 0], [2 / 3, 1, 2 / 3, 1 / 3], [0, 1 / 3, 2 / 3, 1]])
    assert torch.allclose(tri, expected)
    learned = response_weights(r, 4, "learnable_decay", torch.randn(3) * 3)
    assert torch.allclose(learned[torch.arange(3), r], torch.ones(3))
    assert bool((learned[0].diff() < 0).all()) and bool((learned[2].diff() > 0).all()), "must decay with distance"


@pytest.mark.parametrize("embedding", ["one_hot", "linear_decay", "learnable_decay"])
@pytest.mark.parametrize("window", [0, 1, 4])
def test_serving_matches_training_for_every_option(embedding, window, make_histories):
    torch.manual_seed(6)
    model = create("deep-gpcm", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=3, response_embedding=embedding,
                   attention_window=window, **TINY).eval()
    _, hist = make_histories([23, 1, 11, 17], N_ITEMS, N_CONCEPTS, 3, seed=7)
    with torch.no_grad():
        batch, batch_state = model(hist)
    served, served_state = predict_stepwise(model, hist)
    m = hist.mask
    assert torch.allclose(served[m], batch.exp()[m], atol=1e-5)
    for k in batch_state:
        assert torch.allclose(batch_state[k], served_state[k], atol=1e-5), k
    _, flat = make_histories([23, 1, 11, 17], N_ITEMS, N_CONCEPTS, 3, seed=8, step_prob=0.0)  # no step spans a cut
    with torch.no_grad():
        whole, whole_state = model(flat)
        first, state = model(flat.window(0, 9))
        second, state = model(flat.window(9, 23), state)
    assert torch.allclose(torch.cat([first, second], 1)[flat.mask], whole[flat.mask], atol=1e-5)
    for k in whole_state:
        assert torch.allclose(state[k], whole_state[k], atol=1e-5), k


def test_refiner_sees_exactly_its_window_and_nothing_later():
    torch.manual_seed(8)
    W, T = 3, 12
    refiner = CausalRefiner(6, W)
    x, valid = torch.randn(1, T, 6), torch.ones(1, T, dtype=torch.bool)
    cache, cache_valid = torch.zeros(1, W, 6), torch.zeros(1, W)
    changed = x.clone()
    changed[0, 5] += 1.0
    with torch.no_grad():
        a, b = refiner(x, valid, cache, cache_valid)[0], refiner(changed, valid, cache, cache_valid)[0]
    moved = (a - b).abs().amax(-1)[0] > 1e-6  # (T,)
    assert moved.tolist() == [False] * 5 + [True] * (W + 1) + [False] * (T - 6 - W)


def test_refined_model_prediction_ignores_its_own_and_later_responses(make_histories):
    torch.manual_seed(8)
    model = create("deep-gpcm", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=3, attention_window=3,
                   **TINY).eval()
    _, hist = make_histories([30], N_ITEMS, N_CONCEPTS, 3, seed=9, step_prob=0.0)
    changed = hist.replace(responses=hist.responses.clone())
    changed.responses[0, 20:] = (changed.responses[0, 20:] + 1) % 3
    with torch.no_grad():
        a, b = model(hist)[0], model(changed)[0]
    assert torch.equal(a[0, :21], b[0, :21]), "a response moved its own or an earlier prediction"
    assert not torch.allclose(a[0, 21:], b[0, 21:])


def test_unknown_options_are_rejected():
    with pytest.raises(ValueError, match="response_embedding"):
        create("deep-gpcm", n_items=5, n_concepts=3, n_categories=3, response_embedding="bogus")
    with pytest.raises(ValueError, match="attention_window"):
        create("deep-gpcm", n_items=5, n_concepts=3, n_categories=3, attention_window=-1)


# -- losses against references --------------------------------------------------------------------
def _batch(N=400, K=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(N, K, generator=g) * 2
    return F.log_softmax(logits, -1), torch.randint(0, K, (N,), generator=g), logits


def test_cross_entropy_and_class_weights_match_torch_and_sklearn():
    lp, y, logits = _batch()
    assert torch.allclose(L.cross_entropy(lp, y), F.cross_entropy(logits, y), atol=1e-6)
    y_skewed = torch.tensor([3] * 70 + [2] * 20 + [1] * 7 + [0] * 3)
    ref = compute_class_weight("balanced", classes=np.arange(4), y=y_skewed.numpy())
    w = L.class_weights(y_skewed, 4, "balanced")
    assert np.allclose(w.numpy(), ref, rtol=1e-6)
    assert np.allclose(L.class_weights(y_skewed, 4, "sqrt_balanced").numpy(), np.sqrt(ref), rtol=1e-6)
    assert L.class_weights(torch.tensor([0, 0, 1]), 3)[2] == 0, "an absent category gets weight 0"
    assert torch.allclose(L.cross_entropy(lp, y, w), F.cross_entropy(logits, y, weight=w), atol=1e-6)


def test_weighted_ordinal_loss():
    lp, y, logits = _batch()
    w = L.class_weights(y, 4)
    assert torch.allclose(L.weighted_ordinal(lp, y, w, penalty=0.0), F.cross_entropy(logits, y, weight=w), atol=1e-6)
    probs = lp.exp()
    dist = (torch.arange(4).view(1, 4) - y.view(-1, 1)).abs().float()
    expected = F.cross_entropy(logits, y) + 0.7 * (probs * dist).sum(1).mean()
    assert torch.allclose(L.weighted_ordinal(lp, y, None, penalty=0.7), expected, atol=1e-5)
    far, near = torch.log(torch.tensor([[0.5, 0.0 + 1e-9, 0.5 - 1e-9]])), torch.log(torch.tensor([[0.0 + 1e-9, 0.5, 0.5 - 1e-9]]))
    t = torch.tensor([2])
    assert L.weighted_ordinal(far, t, penalty=1.0) > L.weighted_ordinal(near, t, penalty=1.0), \
        "mass two categories away must cost more than mass one away"


def test_focal_loss():
    lp, y, logits = _batch()
    assert torch.allclose(L.focal(lp, y, gamma=0.0), F.cross_entropy(logits, y), atol=1e-6)
    p_y = lp.exp().gather(1, y.view(-1, 1)).squeeze(1)
    expected = (-(1 - p_y) ** 2 * torch.log(p_y)).mean()
    assert torch.allclose(L.focal(lp, y, gamma=2.0), expected, atol=1e-6)


def test_qwk_loss_equals_one_minus_sklearn_kappa_on_hard_predictions():
    _, y, logits = _batch(K=5, seed=3)
    pred = logits.argmax(1)
    hard = torch.log(F.one_hot(pred, 5).float().clamp(min=1e-30))
    ref = cohen_kappa_score(y.numpy(), pred.numpy(), weights="quadratic")
    assert abs(float(L.qwk_loss(hard, y)) - (1 - ref)) < 1e-5
    lp = F.log_softmax(logits.requires_grad_(), -1)
    L.qwk_loss(lp, y).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_coral_loss_matches_binary_cross_entropy_on_cumulative_logits():
    head = CoralHead(6, 5)
    _scramble(head, 4, scale=0.5)
    summary = torch.randn(200, 6)
    y = torch.randint(0, 5, (200,))
    cum = head.cumulative_logits(summary)  # (N, 4)
    levels = (y.view(-1, 1) > torch.arange(4).view(1, -1)).float()
    ref = F.binary_cross_entropy_with_logits(cum, levels, reduction="none").sum(1).mean()
    assert torch.allclose(L.coral_loss(head(summary, None), y), ref, atol=1e-4)


def test_make_loss_is_the_weighted_sum_of_its_terms():
    lp, y, _ = _batch()
    w = L.class_weights(y, 4, "sqrt_balanced")
    loss = L.make_loss({"ce": 1.0, "qwk": 0.5, "focal": {"weight": 0.25, "gamma": 1.5}, "coral": 0.1}, weights=w)
    expected = (L.cross_entropy(lp, y, w) + 0.5 * L.qwk_loss(lp, y) + 0.25 * L.focal(lp, y, 1.5, w)
                + 0.1 * L.coral_loss(lp, y))
    assert torch.allclose(loss(lp, y), expected, atol=1e-6)
    with pytest.raises(ValueError, match="loss config"):
        L.make_loss({"mse": 1.0})


# -- metrics against references -------------------------------------------------------------------
def test_kappa_spearman_auc_match_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 1000)
    pred = np.clip(y + rng.integers(-2, 3, 1000), 0, 4)
    assert abs(quadratic_weighted_kappa(y, pred, 5) - cohen_kappa_score(y, pred, weights="quadratic")) < 1e-9
    score = np.round(y + rng.normal(0, 1.5, 1000), 1)  # with ties
    assert abs(spearman(score, y) - spearmanr(score, y).statistic) < 1e-9
    assert abs(binary_auc(y >= 2, score) - roc_auc_score(y >= 2, score)) < 1e-9


def test_ordinal_report_on_known_predictions():
    probs = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]])
    y = np.array([0, 2, 2, 2])
    r = ordinal_report(probs, y)
    assert r["categorical_accuracy"] == 0.5 and r["ordinal_accuracy"] == 0.75
    assert r["mae"] == round(float(np.mean(np.abs(probs @ np.arange(3) - y))), 4)
    at_least_2 = probs[:, 2]
    assert r["threshold_auc"][1] == round(roc_auc_score(y >= 2, at_least_2), 4)
    assert r["qwk"] == round(cohen_kappa_score(y, probs.argmax(1), weights="quadratic"), 4)
    cal = calibration(probs, y, bins=2)
    assert cal[2]["mean_predicted"] == pytest.approx(0.325) and cal[2]["observed"] == pytest.approx(0.75)
    # category 2: bin [0,.5) holds p = .1, .3, .1 with 2 hits; bin [.5,1] holds .8 with 1 hit
    assert cal[2]["ece"] == pytest.approx((abs(0.5 - 2) + abs(0.8 - 1)) / 4)


# -- ordered outcomes derived from real logs ------------------------------------------------------
@pytest.mark.parametrize("row, expected", [
    ({"correct": 1, "hint_count": 0, "first_action": 0}, 3),
    ({"correct": 0, "hint_count": 0, "first_action": 0}, 2),
    ({"correct": 0, "hint_count": 0, "first_action": 2}, 1),  # asked for the scaffolding breakdown
    ({"correct": 0, "hint_count": 2, "bottom_hint": 0}, 1),
    ({"correct": 0, "hint_count": 1}, 1),  # bottom_hint absent: not shown the answer
    ({"correct": 0, "hint_count": 4, "bottom_hint": 1}, 0),
])
def test_assistments_rule(row, expected):
    assert assistments_category(row) == expected
    assert assistments_category(row, categories=3) == max(expected - 1, 0)


@pytest.mark.parametrize("cfa, counts, expected", [
    (1, {"incorrects": 0, "hints": 0, "corrects": 1}, 3),
    (0, {"incorrects": 2, "hints": 0, "corrects": 1}, 2),
    (0, {"incorrects": 1, "hints": 3, "corrects": 1}, 1),
    (0, {"incorrects": 4, "hints": 1, "corrects": 0}, 0),
    (0, {}, 0),
])
def test_datashop_rule(cfa, counts, expected):
    assert datashop_category(cfa, counts) == expected
    with pytest.raises(ValueError, match="categories"):
        datashop_category(cfa, counts, categories=5)


def test_assistments_ordinal_on_the_real_file_matches_an_independent_count():
    path = require_dataset("assist2009_skillbuilder_raw_2skills") / "as.csv"
    stats = ConversionStats("assistments-ordinal")
    records = list(assistments_ordinal_events(path, stats))
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    expected = {0: 0, 1: 0, 2: 0, 3: 0}
    for r in rows:  # the documented rule, written again from the raw columns
        hints, bottom = int(r["hint_count"]), r["bottom_hint"].strip()
        if hints and bottom and float(bottom) == 1:
            expected[0] += 1
        elif hints or r["first_action"] == "2":
            expected[1] += 1
        else:
            expected[2 + int(r["correct"])] += 1
    assert stats.response_counts == expected and stats.rows_in == len(rows) == len(records)
    assert sum(r["attributes"]["correct"] for r in records) == sum(int(r["correct"]) for r in rows)
    for r in records[:200]:
        assert Event.model_validate(r).to_record() == r


def test_datashop_ordinal_on_the_real_file_keeps_order_and_binary_outcome():
    path = require_dataset("cognitive_tutor_algebra_subset") / "ct.csv"
    stats = ConversionStats("datashop-ordinal")
    records = list(datashop_ordinal_events(path, stats, categories=3))
    assert set(stats.response_counts) == {0, 1, 2} and stats.learners == 11
    top = [r for r in records if r["response"] == 2]
    assert all(r["attributes"]["correct"] == 1 for r in top)
    assert len(top) == sum(r["attributes"]["correct"] for r in records), "top level = correct first attempt"
    for lid, recs in group_by_learner(records).items():
        assert [r["seq"] for r in recs] == list(range(len(recs)))


def test_describe_fills_the_prediction_message(make_histories):
    from ktstream.engine.messages import describe_row

    model = create("deep-gpcm", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=4, **TINY).eval()
    _, hist = make_histories([8, 3], N_ITEMS, N_CONCEPTS, 4, seed=14)
    _, state = predict_stepwise(model, hist)
    with torch.no_grad():
        d = model.predict(state, hist.at(1), describe=True)[1]
    row = describe_row(d, 1, {})
    assert row["ability"] == pytest.approx(float(d["theta"][1]))
    assert row["extras"]["betas"] == pytest.approx(d["betas"][1].tolist())
    assert row["extras"]["alpha"] > 0 and 0 <= row["extras"]["expected_score"] <= 3
