"""Paired bootstrap over learners: is the candidate better than the serving model, beyond noise?

Both models predict the same interactions. Interactions of one learner are
correlated, so the resampling unit is the learner: each bootstrap draw takes
L learners with replacement (the same draw for both models: paired) and
recomputes metric(candidate) - metric(serving) on their pooled interactions.
The interval is the percentile interval at ``confidence`` (two-sided).

The metric is AUC of P(correct) for binary models, and the quadratic weighted
kappa of the most probable category for ordinal models (K > 2).

>>> rng = np.random.default_rng(0)
>>> y = [rng.integers(0, 2, 200) for _ in range(30)]
>>> good = [np.stack([1 - (0.3 + 0.4 * v), 0.3 + 0.4 * v], 1) for v in y]   # informative
>>> coin = [np.full((200, 2), 0.5) + 0.01 * rng.random((200, 2)) for _ in y]  # noise
>>> r = paired_bootstrap(y, good, coin, n_samples=200)
>>> r["metric"], r["difference"] > 0.4, r["ci_low"] > 0.4
('auc', True, True)
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ktstream.scoring.binary import auc
from ktstream.scoring.ordinal import quadratic_weighted_kappa

Metric = Callable[[np.ndarray, np.ndarray], float]


def metric_for(n_categories: int) -> tuple[str, Metric]:
    """("auc", AUC of P(Y=1)) for K = 2; ("qwk", QWK of the argmax category) for K > 2."""
    if n_categories == 2:
        return "auc", lambda y, p: auc(y, p[:, 1])
    return "qwk", lambda y, p: quadratic_weighted_kappa(y, p.argmax(1), n_categories)


def paired_bootstrap(y: Sequence[np.ndarray], candidate: Sequence[np.ndarray], serving: Sequence[np.ndarray],
                     n_samples: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """Per learner: responses (n,), candidate and serving probabilities (n, K). Returns the figures and CI."""
    assert len(y) == len(candidate) == len(serving) and len(y) > 0, "one entry per learner, for both models"
    assert 0 < confidence < 1, f"confidence must be in (0, 1), got {confidence}"
    K = candidate[0].shape[1]
    assert all(c.shape[1] == K and s.shape[1] == K for c, s in zip(candidate, serving)), "models differ in K"
    name, metric = metric_for(K)
    sizes = np.array([len(v) for v in y])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    Y, PC, PS = np.concatenate(y), np.concatenate(candidate), np.concatenate(serving)
    cand, serv = metric(Y, PC), metric(Y, PS)
    rng = np.random.default_rng(seed)
    diffs = np.empty(n_samples)
    for b in range(n_samples):
        pick = rng.integers(0, len(y), len(y))
        rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in pick])
        diffs[b] = metric(Y[rows], PC[rows]) - metric(Y[rows], PS[rows])
    valid = diffs[~np.isnan(diffs)]
    alpha = (1.0 - confidence) / 2.0
    lo, hi = (np.quantile(valid, [alpha, 1.0 - alpha]) if len(valid) else (np.nan, np.nan))
    return {"metric": name, "candidate": float(cand), "serving": float(serv), "difference": float(cand - serv),
            "ci_low": float(lo), "ci_high": float(hi), "confidence": confidence, "n_samples": n_samples,
            "n_valid_samples": int(len(valid)), "learners": len(y), "interactions": int(sizes.sum())}
