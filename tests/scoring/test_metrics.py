import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss as sk_log_loss, roc_auc_score

from ktstream.scoring.binary import auc, log_loss, null_auc_bound, summarize


@pytest.mark.parametrize("seed", range(5))
def test_auc_and_log_loss_match_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 400)
    p = np.round(rng.random(400), 1)  # many ties
    assert auc(y, p) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    q = np.clip(p, 0.01, 0.99)
    assert log_loss(y, q) == pytest.approx(sk_log_loss(y, q), abs=1e-9)


def test_summary_bins_positions_and_scores():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 600)
    p = np.clip(y * 0.3 + rng.random(600) * 0.7, 0, 1)
    pos = np.arange(600) % 300 + 1
    s = summarize(y, p, pos)
    assert s["brier"] == pytest.approx(brier_score_loss(y, p))
    assert s["auc_by_history_length"]["1-2"]["n"] == 4
    assert s["auc_by_history_length"][">200"]["n"] == 200
    assert sum(b["n"] for b in s["auc_by_history_length"].values()) == 600


def test_null_bound_covers_random_scores():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 5000)
    bound = null_auc_bound(int(y.sum()), int((1 - y).sum()))
    hits = [abs(auc(y, rng.random(5000)) - 0.5) <= bound for _ in range(50)]
    assert sum(hits) >= 49 and 0.005 < bound < 0.05
