"""Online prediction quality from the stream itself, for binary models.

Every event that carries a response was predicted before its response was
used, so (p_correct, response) pairs are honest prequential outcomes. Kept
here: rolling ROC AUC (river's ``RollingROCAUC``) and rolling log loss over
the last ``window`` outcomes, calibration counts per probability bin
(cumulative, so Prometheus can take rates over any range), and river's ADWIN
drift detector on |response - p_correct|.

Outcomes arrive a micro-batch at a time (``update_many``): the log-loss terms
and the bin counts are computed with numpy over the batch, and the log loss
is the mean of a ring of the last ``window`` terms, summed afresh when read
(no running sum to drift). AUC and ADWIN take one outcome at a time.

>>> q = OnlineQuality(window=100, bins=5)
>>> _ = q.update_many([0.9 if i % 2 else 0.1 for i in range(200)], [i % 2 for i in range(200)])
>>> round(q.auc(), 3), round(q.log_loss(), 4), q.bin_of(0.95), q.bin_of(1.0)
(1.0, 0.1054, 4, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from river import drift, metrics

EPS = 1e-7  # probabilities are clipped to [EPS, 1 - EPS] before the log loss


@dataclass
class BatchQuality:
    """What one micro-batch added: per-bin counts, correct responses and summed p_correct; drift alarms."""

    n: np.ndarray
    correct: np.ndarray
    p_sum: np.ndarray
    drift_alarms: int


class OnlineQuality:
    def __init__(self, window: int = 1000, bins: int = 10, drift_delta: float = 0.002):
        assert window > 0 and bins > 0, f"window and bins must be positive, got {window}, {bins}"
        self.window, self.bins = window, bins
        self._auc = metrics.RollingROCAUC(window_size=window)
        self._drift = drift.ADWIN(delta=drift_delta)
        self._losses = np.zeros(window)  # ring of the last `window` log-loss terms
        self.seen = 0
        self.drift_alarms = 0

    def bin_of(self, p: float) -> int:
        return min(int(p * self.bins), self.bins - 1)

    def update(self, p_correct: float, response: int) -> bool:
        """Add one outcome (response 1 = correct); True when ADWIN signals drift."""
        return self.update_many([p_correct], [response]).drift_alarms > 0

    def update_many(self, p_correct, responses) -> BatchQuality:
        """Add a batch of outcomes in order (response 1 = correct)."""
        raw = np.asarray(p_correct, dtype=np.float64)
        p = np.clip(raw, EPS, 1 - EPS)
        y = np.asarray(responses) == 1
        bins = np.minimum((raw * self.bins).astype(np.int64), self.bins - 1)  # bin_of, for the whole batch
        out = BatchQuality(np.bincount(bins, minlength=self.bins), np.bincount(bins, weights=y, minlength=self.bins),
                           np.bincount(bins, weights=raw, minlength=self.bins), 0)
        for pi, yi in zip(p.tolist(), y.tolist()):
            self._auc.update(yi, pi)
            self._drift.update(abs(float(yi) - pi))
            out.drift_alarms += self._drift.drift_detected
        self._remember(np.where(y, -np.log(p), -np.log1p(-p)))
        self.seen += len(p)
        self.drift_alarms += out.drift_alarms
        return out

    def _remember(self, losses: np.ndarray) -> None:
        losses = losses[-self.window:]
        at = np.arange(self.seen, self.seen + len(losses)) % self.window
        self._losses[at] = losses

    def auc(self) -> float:
        """Rolling ROC AUC (NaN until both classes were seen in the window)."""
        return float(self._auc.get()) if self.seen else math.nan

    def log_loss(self) -> float:
        """Mean log loss of the last ``window`` outcomes (NaN before the first)."""
        if not self.seen:
            return math.nan
        return float(self._losses[: min(self.seen, self.window)].mean())
