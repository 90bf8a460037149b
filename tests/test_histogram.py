"""BatchHistogram exposes exactly what prometheus_client's Histogram does for the same observations."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ktstream.engine.metrics import END_TO_END_BUCKETS
from ktstream.histogram import BatchHistogram


def series(registry: CollectorRegistry, name: str) -> list[str]:
    """The _bucket / _count / _sum lines (the stock histogram's _created line differs by design)."""
    return [line for line in generate_latest(registry).decode().splitlines()
            if line.startswith(name) and not line.startswith(f"{name}_created")]


def test_batch_histogram_matches_the_stock_histogram():
    rng = random.Random(0)
    values = [rng.expovariate(2.0) for _ in range(2000)] + list(END_TO_END_BUCKETS) + [0.0, -1.0, 1e9]
    stock_registry, batch_registry = CollectorRegistry(), CollectorRegistry()
    stock = Histogram("lat_seconds", "Latency.", buckets=END_TO_END_BUCKETS, registry=stock_registry)
    batch = BatchHistogram("lat_seconds", "Latency.", END_TO_END_BUCKETS, registry=batch_registry)
    for v in values:
        stock.observe(v)
    for i in range(0, len(values), 97):  # uneven micro-batches
        batch.observe_many(values[i : i + 97])
    for _ in range(5):
        stock.observe(0.05)
    batch.observe(0.05, times=5)
    batch.observe_many([])
    batch.observe(0.3, times=0)
    got, want = series(batch_registry, "lat_seconds"), series(stock_registry, "lat_seconds")
    assert [l for l in got if "_sum" not in l] == [l for l in want if "_sum" not in l]
    (got_sum,), (want_sum,) = ([float(l.split()[-1]) for l in x if "_sum" in l] for x in (got, want))
    assert abs(got_sum - want_sum) <= 1e-9 * abs(want_sum)  # summed in another order
    assert batch.count == len(values) + 5
