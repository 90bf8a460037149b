"""Figures of prediction quality, each returned as PNG bytes (matplotlib, Agg backend, no display).

Every figure says on itself what it shows and how many predictions each point
rests on, since a report is read without this code: an AUC from 40
predictions and one from 40,000 must not look alike.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> p = rng.random(500); y = (rng.random(500) < p).astype(int)
>>> png = reliability(p, y)
>>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402

from ktstream.scoring.binary import auc  # noqa: E402

DPI = 110


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def auc_interval(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """AUC and its standard error (Hanley & McNeil 1982), NaN when one class is absent."""
    a, n1 = auc(y, p), int(y.sum())
    n0 = len(y) - n1
    if math.isnan(a):
        return a, float("nan")
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    return a, math.sqrt(max(a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a), 0.0) / (n1 * n0))


def wilson_interval(k: np.ndarray, n: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of the share k / n (per element; n = 0 gives (0, 1)).

    Unlike the normal approximation it stays inside [0, 1] and does not collapse to a point when the
    share is 0 or 1, so a bin of 3 predictions, all correct, reads (0.44, 1.0), not (1.0, 1.0).

    >>> low, high = wilson_interval(np.array([3, 50]), np.array([3, 100]))
    >>> [round(float(x), 3) for x in low], [round(float(x), 3) for x in high]
    ([0.438, 0.404], [1.0, 0.596])
    """
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    safe = np.maximum(n, 1)
    share = k / safe
    denom = 1 + z * z / safe
    centre = (share + z * z / (2 * safe)) / denom
    half = z * np.sqrt(share * (1 - share) / safe + z * z / (4 * safe * safe)) / denom
    low, high = np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)
    return np.where(n > 0, low, 0.0), np.where(n > 0, high, 1.0)


def reliability(p: np.ndarray, y: np.ndarray, bins: int = 10, title: str = "Reliability diagram",
                min_count: int = 30) -> bytes:
    """Observed share correct vs mean predicted P(correct) per bin, with the count per bin below.

    Each point carries its 95% Wilson interval; bins with fewer than ``min_count`` predictions are not
    drawn (their share says little; the count panel still shows them, and the ECE uses every bin).
    """
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    n = np.bincount(idx, minlength=bins)
    mean_p = np.bincount(idx, p, bins) / np.maximum(n, 1)
    correct = np.bincount(idx, y, bins)
    observed = correct / np.maximum(n, 1)
    ece = float((np.abs(mean_p - observed) * n).sum() / max(n.sum(), 1))
    fig, (ax, hx) = plt.subplots(2, 1, figsize=(5.6, 6.2), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfectly calibrated")
    shown = n >= min_count
    low, high = wilson_interval(correct, n)
    err = np.vstack([observed - low, high - observed])[:, shown]
    ax.errorbar(mean_p[shown], observed[shown], yerr=err, fmt="o-", color="C0", capsize=3,
                label="model (bars: 95% Wilson interval)")
    hidden = int(((n > 0) & ~shown).sum())
    note = f"; {hidden} bin(s) under {min_count} predictions not drawn" if hidden else ""
    ax.set(ylabel="observed share correct", xlim=(0, 1), ylim=(0, 1),
           title=f"{title}\nexpected calibration error {ece:.3f} over {int(n.sum()):,} predictions{note}")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    hx.bar((np.arange(bins) + 0.5) / bins, n, width=0.9 / bins, color=np.where(shown, "C0", "lightgrey"), alpha=0.6)
    hx.axhline(min_count, ls=":", color="grey", lw=1)
    hx.set(xlabel="predicted P(correct), binned", ylabel="predictions")
    return to_png(fig)


def category_calibration(probs: np.ndarray, y: np.ndarray, bins: int = 10) -> bytes:
    """Ordinal models: one reliability curve per response category k (predicted P(Y=k) vs observed)."""
    K = probs.shape[1]
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1)
    for k in range(K):
        pk, hit = probs[:, k], (y == k).astype(np.float64)
        idx = np.minimum((pk * bins).astype(int), bins - 1)
        n = np.bincount(idx, minlength=bins)
        has = n >= 20  # sparse bins only add noise to the picture (the ECE below uses every bin)
        mp_all, ob_all = np.bincount(idx, pk, bins) / np.maximum(n, 1), np.bincount(idx, hit, bins) / np.maximum(n, 1)
        mp, ob = mp_all[has], ob_all[has]
        ece = float((np.abs(mp_all - ob_all) * n).sum() / n.sum())
        ax.plot(mp, ob, "o-", label=f"category {k} (ECE {ece:.3f})")
    ax.set(xlabel="predicted P(Y = k), binned", ylabel="observed share with Y = k", xlim=(0, 1), ylim=(0, 1),
           title=f"Per-category calibration, {len(y):,} predictions (bins of >= 20 shown)")
    ax.legend()
    ax.grid(alpha=0.3)
    return to_png(fig)


def auc_over_time(times: np.ndarray, p: np.ndarray, y: np.ndarray, bins: int = 12, min_n: int = 200) -> bytes | None:
    """Test AUC per event-time bin of about equal counts, +/- 1.96 standard errors; None without times."""
    ok = np.isfinite(times)
    if ok.sum() < 2 * min_n:
        return None
    t, p, y = times[ok], p[ok], y[ok]
    order = np.argsort(t, kind="mergesort")
    parts = np.array_split(order, max(1, min(bins, len(order) // min_n)))
    mid = np.array([np.median(t[i]) for i in parts]).astype("datetime64[s]")
    stats = np.array([auc_interval(y[i], p[i]) for i in parts])
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.errorbar(mid, stats[:, 0], yerr=1.96 * stats[:, 1], fmt="o-", capsize=3)
    ax.axhline(0.5, ls=":", color="grey", lw=1)
    ax.set(ylabel="AUC", xlabel="event time (UTC; each point: median time of its bin)",
           title=f"AUC over event time: {len(parts)} bins of about {len(order) // len(parts):,} predictions, "
                 "bars = 95% interval")
    fig.autofmt_xdate()
    ax.grid(alpha=0.3)
    return to_png(fig)


def auc_by_length(series: list[tuple[str, dict]]) -> bytes | None:
    """AUC per history-length bin (1-based position in the learner's history), one line per result."""
    series = [(label, r) for label, r in series if r]
    if not series:
        return None
    bins = [b for b in series[0][1] if any(r.get(b, {}).get("n", 0) for _, r in series)]  # drop empty bins
    if not bins:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for j, (label, by_len) in enumerate(series):
        ys = np.array([np.nan if by_len.get(b, {}).get("auc") is None else by_len[b]["auc"] for b in bins], float)
        n = np.array([max(by_len.get(b, {}).get("n", 0), 2) for b in bins], float)
        se = np.sqrt(1.0 / (3.0 * n))  # AUC standard error at 0.5 with balanced classes: a rough yardstick
        ax.errorbar(np.arange(len(bins)) + 0.06 * (j - (len(series) - 1) / 2), ys, yerr=1.96 * se, fmt="o-",
                    capsize=3, label=label)
    ns = [series[0][1][b]["n"] for b in bins]
    ax.set_xticks(range(len(bins)), [f"{b}\nn={n:,}" for b, n in zip(bins, ns)])
    ax.axhline(0.5, ls=":", color="grey", lw=1)
    ax.set(xlabel=f"position in the learner's history (n: predictions of {series[0][0]})", ylabel="test AUC",
           title="AUC by history length (bars: rough 95% interval from n)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return to_png(fig)


def training_curve(history: list[dict], title: str) -> bytes | None:
    """Training loss and the validation metric per epoch (selection reads validation only)."""
    if not history:
        return None
    valid_key = next((k for k in history[0] if k.startswith("valid_")), None)
    epochs = [h["epoch"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(epochs, [h["train_loss"] for h in history], "o-", color="C1", label="training loss")
    ax.set(xlabel="epoch", ylabel="training loss", title=title)
    ax.set_xticks(epochs)
    if valid_key:
        vx = ax.twinx()
        vx.plot(epochs, [h[valid_key] for h in history], "s-", color="C0", label=valid_key.replace("_", " "))
        vx.set_ylabel(valid_key.replace("_", " "))
        fig.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2)
    ax.grid(alpha=0.3)
    return to_png(fig)
