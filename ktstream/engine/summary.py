"""A one-line live summary of a running engine (events/s, latency percentiles, rolling AUC, lag)."""

from __future__ import annotations

import time

import numpy as np

from ktstream.engine.metrics import EngineMetrics


class Summary:
    def __init__(self, metrics: EngineMetrics):
        self.m = metrics
        self.t0 = self._last_t = time.perf_counter()
        self._last_n = 0.0

    def _percentiles(self) -> tuple[float, float]:
        lat = np.array(self.m.recent_end_to_end, dtype=float)
        return (float(np.percentile(lat, 50)) * 1000, float(np.percentile(lat, 99)) * 1000) if len(lat) else (
            float("nan"), float("nan"))

    def line(self, lag: dict) -> str:
        now, n = time.perf_counter(), self.m.totals["consumed"]
        rate = (n - self._last_n) / max(now - self._last_t, 1e-9)
        self._last_t, self._last_n = now, n
        p50, p99 = self._percentiles()
        dead = sum(self.m.dead_letters().values())
        return (f"[{now - self.t0:5.1f}s] {rate:7.0f} ev/s | in {n:7d} | predictions "
                f"{self.m.totals['predictions']:7d} | dead letters {dead:3d} | e2e p50 {p50:5.1f} ms "
                f"p99 {p99:6.1f} ms | rolling AUC {self.m.quality.auc():.3f} | lag {sum(lag.values())}")

    def final(self, total: int) -> str:
        p50, p99 = self._percentiles()
        return (f"done: {self.m.totals['consumed']}/{total} records, "
                f"{self.m.totals['predictions']} predictions, dead letters {self.m.dead_letters()}, "
                f"end-to-end p50 {p50:.1f} ms p99 {p99:.1f} ms, rolling AUC {self.m.quality.auc():.3f}, "
                f"log loss {self.m.quality.log_loss():.3f}")
