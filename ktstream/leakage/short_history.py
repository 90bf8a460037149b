"""Short-history anomaly: a model may not be much better on a learner's first answers than on later ones.

A causal model knows least at the start of a history, so its AUC on positions
2..10 should not beat its AUC on positions beyond 50 by much. A model that
reads the future does best where a short history leaves the future the
largest share of what it sees (the DisKT symptom). The figure is
``AUC(short) - AUC(long)`` on the test split, from the model as given
(trained); the bound is ``short_margin`` plus ``z`` standard errors of the
difference (Hanley-McNeil, the two groups taken as independent), so a small
test split does not raise false alarms.

>>> round(hanley_mcneil_se(0.75, 500, 500), 4)
0.0154
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ktstream.leakage.config import GateConfig, GateData
from ktstream.leakage.random_labels import binary_view
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel
from ktstream.scoring.binary import auc
from ktstream.training.trainer import predict_histories, score


def hanley_mcneil_se(a: float, n_pos: int, n_neg: int) -> float:
    """Standard error of an AUC ``a`` from n_pos positives and n_neg negatives (Hanley & McNeil 1982)."""
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))


def _group(y: np.ndarray, p: np.ndarray, sel: np.ndarray) -> tuple[float, float, int]:
    ys, ps = y[sel], p[sel]
    n1 = int(ys.sum())
    n0 = len(ys) - n1
    if n1 == 0 or n0 == 0:
        return float("nan"), float("nan"), len(ys)
    a = auc(ys, ps)
    return a, hanley_mcneil_se(a, n1, n0), len(ys)


def short_history_check(model: KTModel, data: GateData, cfg: GateConfig) -> CheckResult:
    name = "short_history"
    histories, scored = (data.test, data.test_scored) if data.test else (data.valid, data.valid_scored)
    if not histories:
        return CheckResult.not_applicable(name, "needs a test (or validation) split")
    device = next(model.parameters()).device
    with torch.no_grad():
        probs = predict_histories(model, histories, 64, device)
    y, p, pos = score(histories, probs, scored)
    yb, pb = binary_view(y, p)
    lo, hi = cfg.short_positions
    a_s, se_s, n_s = _group(yb, pb, (pos >= lo) & (pos <= hi))
    a_l, se_l, n_l = _group(yb, pb, pos > cfg.long_after)
    counts = dict(auc_short=a_s, auc_long=a_l, n_short=n_s, n_long=n_l)
    if min(n_s, n_l) < cfg.min_scored or math.isnan(a_s) or math.isnan(a_l):
        return CheckResult(name, "n/a", detail=f"too few scored interactions: {n_s} at positions {lo}-{hi}, "
                           f"{n_l} beyond {cfg.long_after} (need {cfg.min_scored} each, both classes)",
                           extras=counts)
    figure = a_s - a_l
    bound = cfg.short_margin + cfg.z * math.sqrt(se_s**2 + se_l**2)
    return CheckResult.judge(name, figure, bound, figure <= bound, "AUC(short) - AUC(long) <= bound",
                             f"AUC {a_s:.4f} on positions {lo}-{hi} (n={n_s}) vs {a_l:.4f} beyond "
                             f"{cfg.long_after} (n={n_l}); bound = {cfg.short_margin} + {cfg.z} SE",
                             **counts)
