"""The GPCM learner simulator: valid canonical events, the documented ability dynamics, GPCM responses,
and Deep-GPCM recovering the true parameters from its data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.data.histories import build_vocabularies, collate, encode, group_by_learner
from ktstream.data.simulate_gpcm import gpcm_probs, item_id, learner_id, simulate
from ktstream.models import create
from ktstream.schema import Event
from ktstream.scoring.ordinal import quadratic_weighted_kappa, spearman
from ktstream.training.ordinal_losses import cross_entropy


@pytest.mark.parametrize("K", [2, 4, 10])
def test_records_are_valid_events_in_time_order(K):
    records, truth = simulate(n_learners=20, n_items=15, n_categories=K, length=(5, 30), seed=K)
    assert len(records) == int(truth.lengths.sum())
    for r in records:
        assert Event.model_validate(r).to_record() == r
        assert 0 <= r["response"] < K
    for recs in group_by_learner(records).values():
        times = [r["event_time"] for r in recs]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert truth.betas.shape == (15, K - 1) and bool((np.diff(truth.betas, axis=1) > 0).all())
    assert bool((truth.alpha > 0).all())
    assert {r["response"] for r in records} == set(range(K)), "every category should occur"


def test_same_seed_same_data_and_bad_arguments_rejected():
    a, _ = simulate(n_learners=5, n_items=6, seed=3)
    b, _ = simulate(n_learners=5, n_items=6, seed=3)
    c, _ = simulate(n_learners=5, n_items=6, seed=4)
    assert a == b and a != c
    with pytest.raises(ValueError, match="n_categories"):
        simulate(n_categories=11)
    with pytest.raises(ValueError, match="length"):
        simulate(length=(5, 2))


def test_ability_grows_with_practice_and_decays_with_time():
    records, truth = simulate(n_learners=30, n_items=20, length=(20, 40), forgetting_days=5.0, seed=1)
    by_learner = group_by_learner(records)
    for u, lid in enumerate(sorted(by_learner)):
        t = np.array([r["event_time"] for r in by_learner[lid]]) / 1000.0
        gain, expected = 0.0, []
        for i in range(len(t)):
            if i:
                gain *= np.exp(-(t[i] - t[i - 1]) / (5.0 * 86400))
            expected.append(truth.theta0[u] + gain)
            gain += truth.rate[u] * (1.0 - gain)
        # timestamps are rounded to ms, hence the tolerance
        assert np.allclose(truth.theta_path[u], expected, atol=1e-6)
        assert truth.final_theta[u] == pytest.approx(truth.theta0[u] + gain, abs=1e-6)
        assert [r["item_id"] for r in by_learner[lid]] == [item_id(i) for i in truth.item_path[u]]
    growth = np.array([p[-1] - p[0] for p in truth.theta_path])
    assert (growth > 0).mean() > 0.8, "practice should raise ability for most learners"


def test_responses_follow_gpcm_with_the_true_parameters():
    records, truth = simulate(n_learners=400, n_items=30, n_categories=4, length=(40, 60), seed=2)
    by_learner = group_by_learner(records)
    y = np.concatenate([[r["response"] for r in by_learner[lid]] for lid in sorted(by_learner)])
    oracle = np.concatenate([truth.oracle_probs(u) for u in range(400)])
    counts = np.bincount(y, minlength=4) / len(y)
    assert np.abs(counts - oracle.mean(0)).max() < 0.01
    # the true ability predicts better than an ability shuffled across events
    rng = np.random.default_rng(0)
    items = np.concatenate(truth.item_path)
    shuffled = gpcm_probs(rng.permutation(np.concatenate(truth.theta_path)), truth.alpha[items], truth.betas[items])
    ll = lambda p: np.log(p[np.arange(len(y)), y]).mean()  # noqa: E731
    assert ll(oracle) > ll(shuffled) + 0.1


def test_gpcm_probs_k2_is_2pl():
    theta, alpha, beta = np.array([-1.0, 0.3, 2.0]), np.array([0.5, 1.0, 2.0]), np.array([0.0, 1.0, -1.0])
    p = gpcm_probs(theta, alpha, beta[:, None])
    assert np.allclose(p[:, 1], 1 / (1 + np.exp(-alpha * (theta - beta))))


@pytest.fixture
def one_thread():
    """Small tensors: a second thread only spins (and on a loaded machine costs ten times the CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_deep_gpcm_recovers_the_simulated_parameters(one_thread):
    """A small version of bench/ordinal_recovery.py (same targets): 800 learners, 50 items, K=4."""
    torch.manual_seed(0)
    records, truth = simulate(n_learners=800, n_items=50, n_categories=4, length=(30, 50), seed=1)
    held_out = {learner_id(u) for u in range(0, 800, 5)}
    train_recs = [r for r in records if r["learner_id"] not in held_out]
    items, concepts = build_vocabularies(train_recs)
    train_h = encode(train_recs, items, concepts)
    test_h = encode([r for r in records if r["learner_id"] in held_out], items, concepts)
    model = create("deep-gpcm", n_items=len(items), n_concepts=len(concepts), n_categories=4, memory_size=10,
                   key_dim=32, value_dim=64, summary_dim=32)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(15):
        order = rng.permutation(len(train_h))
        for i in range(0, len(order), 32):
            batch = collate([train_h[j] for j in order[i : i + 32]])
            log_probs, _ = model(batch)
            loss = cross_entropy(log_probs[batch.mask], batch.responses[batch.mask])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    known = [i for i in range(50) if item_id(i) in items]
    idx = torch.tensor([items.encode(item_id(i)) for i in known])
    conc = torch.tensor([[concepts.encode(f"C{int(truth.item_concept[i]):02d}")] for i in known])
    test_u = [int(h.learner_id[1:]) for h in test_h]
    with torch.no_grad():
        _, betas = model.head.item_parameters(model.question(idx, conc))
        batch = collate(test_h)
        log_probs, state = model(batch)
        thetas = []
        for i in range(len(known)):  # final ability: theta averaged over every item as the query
            q = batch.at(0)
            q.items, q.concepts = idx[i].expand(len(test_h)), conc[i].expand(len(test_h), -1)
            thetas.append(model.predict(state, q, describe=True)[1]["theta"])
    assert spearman(truth.difficulty[known], betas.mean(-1).numpy()) >= 0.8
    assert spearman(truth.final_theta[test_u], torch.stack(thetas, 1).mean(1).numpy()) >= 0.8
    y = batch.responses[batch.mask].numpy()
    oracle = np.concatenate([truth.oracle_probs(u) for u in test_u])
    ours = quadratic_weighted_kappa(y, log_probs[batch.mask].argmax(-1).numpy(), 4)
    assert ours >= 0.9 * quadratic_weighted_kappa(y, oracle.argmax(1), 4)
