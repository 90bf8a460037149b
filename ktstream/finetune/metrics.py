"""Prometheus metrics of the trainer, in their own registry (the engine's stay separate).

Names follow ktstream's conventions (``ktstream_`` prefix, units in the name,
counters ending in ``_total``). ``SERIES`` lists them; docs/finetuning.md explains each.
``serve`` answers ``/metrics``, ``/healthz`` and ``/readyz`` with the engine's HTTP server
(ktstream.engine.server: bounded, content negotiation, the standard ``process_*`` series).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from ktstream.engine.metrics import with_process_series
from ktstream.engine.server import MetricsServer

if TYPE_CHECKING:
    from ktstream.finetune.scheduler import CycleResult

OUTCOMES = ("promoted", "rejected", "failed")
DURATION_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
SERIES = ("ktstream_finetune_runs_total", "ktstream_finetune_duration_seconds", "ktstream_finetune_window_metric",
          "ktstream_finetune_ci_low", "ktstream_finetune_cutoff_timestamp_seconds", "ktstream_registry_model_info")


class FinetuneMetrics:
    def __init__(self):
        self.registry = r = with_process_series(CollectorRegistry(auto_describe=True))
        self.runs = Counter("ktstream_finetune_runs", "Fine-tuning cycles by outcome.", ["outcome"], registry=r)
        self.duration = Histogram("ktstream_finetune_duration_seconds", "Wall time of a cycle (replay to decision).",
                                  buckets=DURATION_BUCKETS, registry=r)
        self.metric = Gauge("ktstream_finetune_window_metric", "Last cycle's metric on [C+H, C+2H) per model.",
                            ["model", "metric"], registry=r)
        self.ci_low = Gauge("ktstream_finetune_ci_low", "Lower CI bound of candidate minus serving, last cycle.",
                            registry=r)
        self.cutoff = Gauge("ktstream_finetune_cutoff_timestamp_seconds", "Cutoff C of the last cycle (event time).",
                            registry=r)
        self.version = Info("ktstream_registry_model", "Latest promoted model version.", registry=r)
        for outcome in OUTCOMES:
            self.runs.labels(outcome)

    def observe(self, cycle: "CycleResult") -> None:
        self.runs.labels(cycle.outcome).inc()
        self.duration.observe(cycle.seconds)
        self.cutoff.set(cycle.cutoff_ms / 1000.0)
        comparison = (cycle.decision or {}).get("comparison")
        if comparison:
            self.metric.labels("candidate", comparison["metric"]).set(comparison["candidate"])
            self.metric.labels("serving", comparison["metric"]).set(comparison["serving"])
            self.ci_low.set(comparison["ci_low"])
        if cycle.outcome == "promoted":
            self.version.info({"version": cycle.name})

    def failed(self, seconds: float) -> None:
        self.runs.labels("failed").inc()
        self.duration.observe(seconds)

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def serve(self, port: int, host: str = "127.0.0.1") -> MetricsServer:
        """The trainer's endpoints until ``close()``: ``/healthz`` and ``/readyz`` answer 200 while the
        process runs (a fine-tuning cycle may take an hour of one thread: liveness is the process's)."""
        return MetricsServer(self.registry, lambda: True, lambda: True, host, port)
