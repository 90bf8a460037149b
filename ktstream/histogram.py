"""A Prometheus histogram that takes a whole micro-batch of observations at once.

``prometheus_client.Histogram.observe`` is one Python call (a lock, a bucket
scan) per value; the engine observes two latencies per event, which cost as
much as a tenth of its loop. ``BatchHistogram`` bins a batch with numpy
(``searchsorted`` + ``bincount``) and adds the counts under one lock. It is a
custom collector, so the exposition is the standard ``_bucket`` / ``_count`` /
``_sum`` series of a histogram, with cumulative buckets and ``+Inf``.

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> r = CollectorRegistry()
>>> h = BatchHistogram("demo_seconds", "Demo.", (0.1, 1.0), registry=r)
>>> h.observe_many([0.05, 0.1, 0.5, 3.0]); h.observe(0.2, times=2)
>>> [l for l in generate_latest(r).decode().splitlines() if l.startswith("demo_seconds_bucket")]
['demo_seconds_bucket{le="0.1"} 2.0', 'demo_seconds_bucket{le="1.0"} 5.0', 'demo_seconds_bucket{le="+Inf"} 6.0']
"""

from __future__ import annotations

import threading
from typing import Iterable, Sequence

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class BatchHistogram:
    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry | None = None):
        bounds = [float(b) for b in buckets if float(b) != float("inf")]  # +Inf is always added
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds), f"buckets must increase: {buckets}"
        self.name, self.documentation = name, documentation
        self._bounds = np.array(bounds)
        self._counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # per bucket, last = above every bound
        self._sum = 0.0
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def observe_many(self, values: Iterable[float] | np.ndarray) -> None:
        """Observe every value (``le`` semantics: a value equal to a bound falls in that bucket)."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return
        counts = np.bincount(np.searchsorted(self._bounds, v, side="left"), minlength=len(self._counts))
        with self._lock:
            self._counts += counts
            self._sum += float(v.sum())

    def observe(self, value: float, times: int = 1) -> None:
        """Observe ``value`` ``times`` times (one latency shared by a batch's events)."""
        if times <= 0:
            return
        i = int(np.searchsorted(self._bounds, value, side="left"))
        with self._lock:
            self._counts[i] += times
            self._sum += value * times

    @property
    def count(self) -> int:
        return int(self._counts.sum())

    def collect(self):
        with self._lock:
            cumulative, total = np.cumsum(self._counts).tolist(), self._sum
        family = HistogramMetricFamily(self.name, self.documentation)
        les = [floatToGoString(b) for b in self._bounds.tolist()] + ["+Inf"]  # as prometheus_client writes them
        family.add_metric([], list(zip(les, cumulative)), total)
        return [family]

    def describe(self):
        return [HistogramMetricFamily(self.name, self.documentation)]
