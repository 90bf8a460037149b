"""Metrics for ordered responses 0..K-1, from predicted category probabilities (N, K).

The predicted category is the most probable one (argmax); the expected score
is sum_k k P(Y=k). Kappa and Spearman are the usual definitions (tests check
them against sklearn and scipy); AUCs are per threshold k = 1..K-1 on the
binary event Y >= k scored by P(Y >= k), which shows whether the model ranks
learners right at every cut of the scale, not only at the top.

>>> p = np.array([[0.8, 0.2, 0.0], [0.1, 0.6, 0.3], [0.0, 0.3, 0.7]])
>>> r = ordinal_report(p, np.array([0, 2, 2]))
>>> r["categorical_accuracy"], r["ordinal_accuracy"], round(r["qwk"], 4)
(0.6667, 1.0, 0.8)
"""

from __future__ import annotations

import numpy as np


def _arrays(probs, targets) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(targets, dtype=np.int64)
    assert p.ndim == 2 and y.shape == (p.shape[0],), f"expected probs (N, K) and targets (N,), got {p.shape}, {y.shape}"
    return p, y


def rankdata(x) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (scipy.stats.rankdata's default)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sx = x[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sx)) + 1])
    ends = np.concatenate([starts[1:], [len(x)]])
    ranks = np.empty(len(x))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(a, b) -> float:
    """Spearman's rho: Pearson correlation of the tie-averaged ranks (nan when one side is constant)."""
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = np.sqrt((ra**2).sum() * (rb**2).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")


def binary_auc(y, score) -> float:
    """Mann-Whitney AUC with ties counted one half (nan when only one class is present)."""
    y = np.asarray(y, dtype=bool)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    return float((rankdata(score)[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def quadratic_weighted_kappa(y_true, y_pred, K: int) -> float:
    """Cohen's kappa with weights (i - j)^2 / (K-1)^2 over categories 0..K-1."""
    y_true, y_pred = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    observed = np.zeros((K, K))
    np.add.at(observed, (y_true, y_pred), 1.0)
    expected = np.outer(observed.sum(1), observed.sum(0)) / max(len(y_true), 1)
    k = np.arange(K)
    w = (k[:, None] - k[None, :]) ** 2 / max(K - 1, 1) ** 2
    denom = (w * expected).sum()
    return float(1.0 - (w * observed).sum() / denom) if denom > 0 else float("nan")


def calibration(probs, targets, bins: int = 10) -> list[dict]:
    """Per category: mean predicted P(Y=k) vs observed share, and the binned expected calibration error."""
    p, y = _arrays(probs, targets)
    out = []
    for k in range(p.shape[1]):
        hit = (y == k).astype(np.float64)
        idx = np.minimum((p[:, k] * bins).astype(np.int64), bins - 1)
        n = np.bincount(idx, minlength=bins)
        gap = np.abs(np.bincount(idx, p[:, k], bins) - np.bincount(idx, hit, bins))
        out.append({"category": k, "mean_predicted": float(p[:, k].mean()), "observed": float(hit.mean()),
                    "ece": float(gap.sum() / max(n.sum(), 1))})
    return out


def ordinal_report(probs, targets) -> dict:
    """Every ordinal metric of one set of predictions (rounded to 4 decimals)."""
    p, y = _arrays(probs, targets)
    K = p.shape[1]
    pred = p.argmax(1)
    expected = p @ np.arange(K)
    at_least = np.cumsum(p[:, ::-1], axis=1)[:, ::-1]  # (N, K): P(Y >= k)
    out = {
        "n": int(len(y)),
        "categorical_accuracy": float((pred == y).mean()),
        "ordinal_accuracy": float((np.abs(pred - y) <= 1).mean()),
        "qwk": quadratic_weighted_kappa(y, pred, K),
        "mae": float(np.abs(expected - y).mean()),
        "spearman": spearman(expected, y),
        "threshold_auc": [binary_auc(y >= k, at_least[:, k]) for k in range(1, K)],
    }
    out = {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}
    out["threshold_auc"] = [round(a, 4) for a in out["threshold_auc"]]
    out["calibration"] = calibration(p, y)
    return out
