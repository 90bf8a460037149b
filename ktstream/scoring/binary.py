"""Binary prediction metrics, scored once per interaction.

AUC is the Mann-Whitney statistic with tied scores counted as one half, the
same figure sklearn's roc_auc_score gives (a test checks it).

>>> round(auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), 4)
0.75
"""

from __future__ import annotations

import math

import numpy as np

#: History-length bins for "AUC by history length" (1-based position in the learner's history).
LENGTH_BINS = [(1, 2), (3, 10), (11, 50), (51, 100), (101, 200), (201, None)]
#: their labels in ``summarize``'s "auc_by_history_length" and the comparison table: "1-2" ... ">200"
LENGTH_LABELS = [f"{lo}-{hi}" if hi else f">{lo - 1}" for lo, hi in LENGTH_BINS]


def auc(y, p) -> float:
    y = np.asarray(y, dtype=np.int64)
    p = np.asarray(p, dtype=np.float64)
    n1 = int(y.sum())
    n0 = len(y) - n1
    if n1 == 0 or n0 == 0:
        return float("nan")
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p), dtype=np.float64)
    sorted_p = p[order]
    # average ranks over ties
    boundaries = np.flatnonzero(np.diff(sorted_p)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(p)]])
    avg = (starts + ends + 1) / 2.0  # 1-based average rank of each tie block
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[y == 1].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def log_loss(y, p, eps: float = 1e-7) -> float:
    y = np.asarray(y, dtype=np.float64)
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def null_auc_bound(n_pos: int, n_neg: int, z: float = 3.29, floor: float = 0.0) -> float:
    """Half-width of the AUC interval under 'no signal' (Mann-Whitney null, two-sided z)."""
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return max(floor, z * math.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg)))


def summarize(y, p, positions=None) -> dict:
    """AUC, accuracy, log loss, RMSE, Brier, and AUC by history length.

    y: responses 0/1; p: P(correct); positions: 1-based index of each
    interaction in its learner's history (for the by-length breakdown).
    """
    y = np.asarray(y, dtype=np.int64)
    p = np.asarray(p, dtype=np.float64)
    err = p - y
    out = {
        "n": int(len(y)),
        "share_correct": float(y.mean()) if len(y) else float("nan"),
        "auc": auc(y, p),
        "accuracy": float(((p >= 0.5) == (y == 1)).mean()) if len(y) else float("nan"),
        "log_loss": log_loss(y, p) if len(y) else float("nan"),
        "rmse": float(np.sqrt(np.mean(err**2))) if len(y) else float("nan"),
        "brier": float(np.mean(err**2)) if len(y) else float("nan"),
    }
    if positions is not None:
        positions = np.asarray(positions)
        by_len = {}
        for (lo, hi), label in zip(LENGTH_BINS, LENGTH_LABELS):
            sel = (positions >= lo) & (positions <= hi if hi else True)
            by_len[label] = {"n": int(sel.sum()), "auc": auc(y[sel], p[sel]) if sel.any() else float("nan")}
        out["auc_by_history_length"] = by_len
    return out


def format_table(rows: list[dict], columns: list[str]) -> str:
    """Plain-text table (markdown pipe syntax) of result rows: metrics to 4 decimals, durations in
    minutes (columns ending in ``minutes``, stored to hundredths) to 2, as the HTML report prints them.

    >>> print(format_table([{"auc": 0.65, "minutes": 0.65}], ["auc", "minutes"]))
    | auc | minutes |
    |---|---|
    | 0.6500 | 0.65 |
    """
    def cell(column, v):
        if isinstance(v, float):
            return f"{v:.2f}" if column.endswith("minutes") else f"{v:.4f}"
        return str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c, r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
