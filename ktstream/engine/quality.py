"""Online prediction quality from the stream itself (river), for binary models.

Every event that carries a response was predicted before its response was
used, so (p_correct, response) pairs are honest prequential outcomes. Kept
here: rolling ROC AUC and rolling log loss over the last ``window`` outcomes,
calibration counts per probability bin (cumulative, so Prometheus can take
rates over any range), and an ADWIN drift detector on |response - p_correct|.

>>> q = OnlineQuality(window=100, bins=5)
>>> for i in range(200):
...     _ = q.update(0.9 if i % 2 else 0.1, i % 2)
>>> round(q.auc(), 3), q.bin_of(0.95), q.bin_of(1.0)
(1.0, 4, 4)
"""

from __future__ import annotations

import math

from river import drift, metrics, utils


class OnlineQuality:
    def __init__(self, window: int = 1000, bins: int = 10, drift_delta: float = 0.002):
        assert window > 0 and bins > 0, f"window and bins must be positive, got {window}, {bins}"
        self.window, self.bins = window, bins
        self._auc = metrics.RollingROCAUC(window_size=window)
        self._log_loss = utils.Rolling(metrics.LogLoss, window_size=window)
        self._drift = drift.ADWIN(delta=drift_delta)
        self.seen = 0
        self.drift_alarms = 0

    def bin_of(self, p: float) -> int:
        return min(int(p * self.bins), self.bins - 1)

    def update(self, p_correct: float, response: int) -> bool:
        """Add one outcome (response 1 = correct); True when ADWIN signals drift."""
        y = response == 1
        p = min(max(p_correct, 1e-7), 1 - 1e-7)
        self._auc.update(y, p)
        self._log_loss.update(y, p)
        self._drift.update(abs(float(y) - p))
        self.seen += 1
        if self._drift.drift_detected:
            self.drift_alarms += 1
            return True
        return False

    def auc(self) -> float:
        """Rolling ROC AUC (NaN until both classes were seen in the window)."""
        return float(self._auc.get()) if self.seen else math.nan

    def log_loss(self) -> float:
        return float(self._log_loss.get()) if self.seen else math.nan
