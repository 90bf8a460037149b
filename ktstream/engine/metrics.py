"""Prometheus metrics of one engine instance, in its own registry (tests and benches never collide).

Names follow Prometheus conventions: a ``ktstream_`` prefix, base units in the
name (seconds, bytes), counters ending in ``_total``. docs/engine.md lists every
series with its meaning; ``SERIES`` below is that list, checked by the tests.
The registry also carries prometheus_client's standard ``process_*`` series (memory,
CPU, open file descriptors; Linux only) and ``python_info`` (``with_process_series``),
as the default registry would.
"""

from __future__ import annotations

from collections import Counter as Tally, deque
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Info, PlatformCollector, ProcessCollector, \
    generate_latest

from ktstream.engine.quality import OnlineQuality
from ktstream.histogram import BatchHistogram

if TYPE_CHECKING:
    from ktstream.engine.processor import Batch

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
END_TO_END_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
BATCH_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2500, 5000)
WAVE_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000)

SERIES = (
    "ktstream_events_consumed_total", "ktstream_predictions_produced_total", "ktstream_dead_letters_total",
    "ktstream_late_events_total", "ktstream_duplicate_events_total", "ktstream_batch_failures_total",
    "ktstream_processing_latency_seconds", "ktstream_end_to_end_latency_seconds",
    "ktstream_batch_size_events", "ktstream_wave_size_learners", "ktstream_consumer_lag_records",
    "ktstream_learners_cached", "ktstream_state_cache_bytes", "ktstream_state_cache_evictions_total",
    "ktstream_rebalances_total", "ktstream_model_info", "ktstream_online_roc_auc", "ktstream_online_log_loss",
    "ktstream_calibration_predictions_total", "ktstream_calibration_correct_total",
    "ktstream_calibration_probability_sum_total", "ktstream_drift_alarms_total",
    "ktstream_model_swaps_total", "ktstream_states_rebuilt_total", "ktstream_loop_seconds_total",
    "ktstream_batch_retries_total",
    "ktstream_model_load_failures_total", "ktstream_state_stores_quarantined_total",
)
#: The standard series every ktstream registry carries besides its own (``with_process_series``).
PROCESS_SERIES = ("process_resident_memory_bytes", "process_virtual_memory_bytes", "process_cpu_seconds_total",
                  "process_open_fds", "process_max_fds", "process_start_time_seconds", "python_info")


def with_process_series(registry: CollectorRegistry) -> CollectorRegistry:
    """Add the process collector (``process_*``: memory, CPU, file descriptors, start time; read from
    /proc, so Linux only) and the platform collector (``python_info``) to ``registry``.

    >>> r = with_process_series(CollectorRegistry())
    >>> r.get_sample_value("process_resident_memory_bytes") > 0
    True
    """
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


#: Phases of the engine loop timed by ``ktstream_loop_seconds_total`` (ktstream.engine.engine.Engine.step).
LOOP_PHASES = ("poll", "process", "send", "flush", "commit", "apply", "gc")


class EngineMetrics:
    def __init__(self, quality_window: int = 1000, calibration_bins: int = 10, recent: int = 10_000):
        self.registry = r = with_process_series(CollectorRegistry(auto_describe=True))
        self.consumed = Counter("ktstream_events_consumed", "Input records polled (valid or not).", registry=r)
        self.predicted = Counter("ktstream_predictions_produced", "Predictions flushed to the sink.", registry=r)
        self.dead = Counter("ktstream_dead_letters", "Records sent to the dead-letter topic.", ["reason"], registry=r)
        self.late = Counter("ktstream_late_events", "Events older than the learner's last applied event.",
                            ["action"], registry=r)
        self.duplicates = Counter("ktstream_duplicate_events", "Redelivered records skipped by source offset.",
                                  registry=r)
        self.failures = Counter("ktstream_batch_failures", "Micro-batches rolled back.", ["stage"], registry=r)
        self.retries = Counter("ktstream_batch_retries", "Rolled-back micro-batches processed again (at most "
                               "engine.max_batch_retries in a row, then the engine stops).", registry=r)
        self.swaps = Counter("ktstream_model_swaps", "Model versions swapped in while serving.", registry=r)
        self.model_load_failures = Counter("ktstream_model_load_failures", "Promoted model versions that could "
                                           "not be loaded (the current version kept serving).", registry=r)
        self.stores_quarantined = Counter("ktstream_state_stores_quarantined", "Corrupt local state stores "
                                          "moved aside (the partition is rebuilt from the changelog).", registry=r)
        self.rebuilt = Counter("ktstream_states_rebuilt", "Learner states rebuilt with new weights after a swap "
                               "(lazy: on the learner's next event; background: between micro-batches).",
                               ["mode"], registry=r)
        self.processing = BatchHistogram("ktstream_processing_latency_seconds",
                                         "Poll return to sink flushed, per event.", LATENCY_BUCKETS, r)
        self.end_to_end = BatchHistogram("ktstream_end_to_end_latency_seconds",
                                         "Event time to prediction produced.", END_TO_END_BUCKETS, r)
        self.batch_size = BatchHistogram("ktstream_batch_size_events", "Records per micro-batch.", BATCH_BUCKETS, r)
        self.wave_size = BatchHistogram("ktstream_wave_size_learners", "Learners per model call (wave).",
                                        WAVE_BUCKETS, r)
        self.lag = Gauge("ktstream_consumer_lag_records", "Fetcher high-watermark minus position.",
                         ["topic", "partition"], registry=r)
        self.cached = Gauge("ktstream_learners_cached", "Learner states in the hot cache.", registry=r)
        self.cache_bytes = Gauge("ktstream_state_cache_bytes", "Bytes of learner state in the hot cache.", registry=r)
        self.evictions = Counter("ktstream_state_cache_evictions", "Learner states evicted from the cache.",
                                 registry=r)
        self.rebalances = Counter("ktstream_rebalances", "Partitions assigned / revoked / lost.", ["kind"],
                                  registry=r)
        self.model = Info("ktstream_model", "Model serving predictions.", registry=r)
        self.auc = Gauge("ktstream_online_roc_auc", "Rolling ROC AUC of p_correct (binary models).", registry=r)
        self.log_loss = Gauge("ktstream_online_log_loss", "Rolling log loss of p_correct.", registry=r)
        self.cal_n = Counter("ktstream_calibration_predictions", "Outcomes per probability bin.", ["bin"], registry=r)
        self.cal_correct = Counter("ktstream_calibration_correct", "Correct responses per probability bin.",
                                   ["bin"], registry=r)
        self.cal_p = Counter("ktstream_calibration_probability_sum", "Sum of p_correct per probability bin.",
                             ["bin"], registry=r)
        self.drift = Counter("ktstream_drift_alarms", "ADWIN alarms on |response - p_correct|.", registry=r)
        self.loop_seconds = Counter("ktstream_loop_seconds", "Wall time of the engine loop in each phase of a "
                                    "micro-batch (poll, process, send, flush, commit, apply).", ["phase"], registry=r)
        self._phases = {phase: self.loop_seconds.labels(phase) for phase in LOOP_PHASES}
        self.quality = OnlineQuality(quality_window, calibration_bins)
        self.bins = [f"{i / calibration_bins:.2f}-{(i + 1) / calibration_bins:.2f}" for i in range(calibration_bins)]
        self.recent_end_to_end: deque[float] = deque(maxlen=recent)  # seconds, for live summaries
        self.recent_processing: deque[float] = deque(maxlen=recent)
        self._evictions_seen = 0
        self._changelog_compacted: Gauge | None = None  # registered by changelog_compaction (durable state only)
        #: Plain running totals (consumed, predictions, dead:<reason>, ...) for summaries and tests.
        self.totals: Tally = Tally()
        for reason in ("oversized", "invalid_json", "schema", "missing_key", "key_mismatch", "future", "late",
                       "duplicate", "output_too_large"):
            self.dead.labels(reason)
        for action in ("applied", "dead_lettered"):
            self.late.labels(action)
        for stage in ("sink", "commit", "commit_unknown"):
            self.failures.labels(stage)
        for kind in ("assigned", "revoked", "lost"):
            self.rebalances.labels(kind)
        for mode in ("lazy", "background"):
            self.rebuilt.labels(mode)
        for b in self.bins:
            self.cal_n.labels(b), self.cal_correct.labels(b), self.cal_p.labels(b)

    def loop_time(self, phase: str, seconds: float) -> None:
        self._phases[phase].inc(seconds)

    @property
    def loop_totals(self) -> dict[str, float]:
        """Seconds of the loop in each phase so far, as exported (for benches and summaries)."""
        value = self.registry.get_sample_value
        return {phase: value("ktstream_loop_seconds_total", {"phase": phase}) for phase in LOOP_PHASES}

    def changelog_compaction(self, compacted: bool) -> None:
        """``ktstream_changelog_compacted``: 1 when the changelog topic is compacted, 0 when the broker
        cannot compact it (``kafka.broker_compacts: false``); absent without durable state."""
        if self._changelog_compacted is None:
            self._changelog_compacted = Gauge("ktstream_changelog_compacted", "1: the state changelog topic is "
                                              "compacted; 0: it is not (it keeps every committed state).",
                                              registry=self.registry)
        self._changelog_compacted.set(1 if compacted else 0)

    def model_info(self, name: str, version: str) -> None:
        self.model.info({"name": name, "version": version})

    def observe_batch(self, batch: "Batch", flushed_ms: int) -> None:
        """Record a committed micro-batch."""
        self.totals.update({"consumed": batch.records, "predictions": batch.predictions,
                            "late_applied": batch.late_applied, "duplicates": batch.duplicates})
        self.totals.update({f"dead:{r}": n for r, n in batch.dead_letters.items()})
        self.consumed.inc(batch.records)
        self.predicted.inc(batch.predictions)
        self.rebuilt.labels("lazy").inc(batch.rebuilt)
        for reason, n in batch.dead_letters.items():
            self.dead.labels(reason).inc(n)
        self.late.labels("applied").inc(batch.late_applied)
        self.late.labels("dead_lettered").inc(batch.dead_letters.get("late", 0))
        self.duplicates.inc(batch.duplicates)
        self.batch_size.observe(batch.records)
        self.wave_size.observe_many(batch.wave_sizes)
        processing = max(flushed_ms - batch.received_ms, 0) / 1000.0
        self.processing.observe(processing, times=batch.predictions)
        self.recent_processing.extend([processing] * min(batch.predictions, 1000))
        end_to_end = np.asarray(batch.end_to_end_ms, dtype=np.float64) / 1000.0
        self.end_to_end.observe_many(end_to_end)
        self.recent_end_to_end.extend(end_to_end.tolist())
        self._quality(batch.outcomes)

    def _quality(self, outcomes: list[tuple[float, int]]) -> None:
        if not outcomes:
            return
        p, y = zip(*outcomes)
        q = self.quality.update_many(p, y)
        self.drift.inc(q.drift_alarms)
        for i in np.flatnonzero(q.n).tolist():
            self.cal_n.labels(self.bins[i]).inc(int(q.n[i]))
            self.cal_correct.labels(self.bins[i]).inc(float(q.correct[i]))
            self.cal_p.labels(self.bins[i]).inc(float(q.p_sum[i]))

    def observe_state(self, learners: int, nbytes: int, evictions: int, lag: dict[tuple[str, int], int]) -> None:
        """Gauges sampled by the engine loop: cache size, per-partition lag and the rolling quality
        (reading river's rolling AUC walks its whole window: once per sample, not per micro-batch)."""
        if self.quality.seen:
            self.auc.set(self.quality.auc())
            self.log_loss.set(self.quality.log_loss())
        self.cached.set(learners)
        self.cache_bytes.set(nbytes)
        self.evictions.inc(max(evictions - self._evictions_seen, 0))
        self._evictions_seen = max(evictions, self._evictions_seen)
        for (topic, partition), n in lag.items():
            self.lag.labels(topic, str(partition)).set(n)

    def forget_partitions(self, partitions: list[tuple[str, int]]) -> None:
        for topic, partition in partitions:
            try:
                self.lag.remove(topic, str(partition))
            except KeyError:
                pass

    def dead_letters(self) -> dict[str, int]:
        return {k.split(":", 1)[1]: n for k, n in self.totals.items() if k.startswith("dead:")}

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
