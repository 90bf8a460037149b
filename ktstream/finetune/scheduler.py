"""The trainer loop: replay -> fine-tune -> gate -> promote or reject, every N events or T of event time.

One cycle (``run_cycle``) at cutoff C, horizon H:

1. ``build_windows``: windows < C, [C, C+H), [C+H, C+2H); vocabularies from < C,
   extending the serving model's (warm start); the ``Trainer`` builds them from the
   archive in columns and streams the training window (``build_windows_from_archive``
   with ``train_buffer_events``: memory bounded by the scan's limit, one training buffer
   and the histories of the learners active in [C, C+2H), not by the archive's size);
2. ``fine_tune`` the serving model (or train ``family`` from scratch when the
   registry is empty);
3. ``judge``: leakage gate, then paired bootstrap against the serving model;
4. publish a new immutable version, or keep the candidate under ``rejected/``
   with its report.

A model whose judge window ends at C+2H can only be put into service once the
archive holds events up to C+2H, so the ``Trainer`` picks C = watermark - 2H,
where the watermark is the newest archived event time minus ``lateness``.
It runs a cycle when C has moved ``every_ms`` of event time past the last
cycle's cutoff, or ``every_events`` archived events have arrived since; after
a restart it resumes after the last window tried (the latest version's cutoff, or a later
rejected candidate's: a rejected window is not retried).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from ktstream.data.archive_reader import archive_summary
from ktstream.data.columnar import ScanConfig
from ktstream.finetune.finetune import FinetuneConfig, fine_tune
from ktstream.finetune.metrics import FinetuneMetrics
from ktstream.finetune.promotion import PromotionConfig, judge, promote_or_reject
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.windows import TimeWindows, build_windows, build_windows_from_archive

log = logging.getLogger(__name__)


@dataclass
class CycleResult:
    cutoff_ms: int
    horizon_ms: int
    outcome: str  # promoted | rejected
    name: str  # the new version, or the rejected candidate's folder
    parent: str | None
    decision: dict[str, Any]
    finetune: dict[str, Any]
    window: dict[str, Any]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_cycle(records: Iterable[dict[str, Any]] | None, cutoff_ms: int, horizon_ms: int, registry: ModelRegistry,
              family: str = "dkt", model_kwargs: dict | None = None, ft: FinetuneConfig | None = None,
              promotion: PromotionConfig | None = None, metrics: FinetuneMetrics | None = None,
              windows: Callable[..., TimeWindows] | None = None) -> CycleResult:
    """One cycle on ``records`` (any order), or on the windows ``windows(base vocabularies, n_categories)``
    builds (``records`` then unused: the ``Trainer`` reads the archive in columns)."""
    if windows is None:
        def windows(base, n_categories):
            return build_windows(records, cutoff_ms, horizon_ms, base, n_categories)

    return run_cycle_on(windows, registry, family, model_kwargs, ft, promotion, metrics)


def run_cycle_on(windows: Callable[..., TimeWindows], registry: ModelRegistry, family: str = "dkt",
                 model_kwargs: dict | None = None, ft: FinetuneConfig | None = None,
                 promotion: PromotionConfig | None = None, metrics: FinetuneMetrics | None = None) -> CycleResult:
    """One cycle on the windows that ``windows(base vocabularies, n_categories)`` builds (from records,
    or from the archive in columns: ``build_windows_from_archive``)."""
    started = time.time()
    ft, promotion = ft or FinetuneConfig(), promotion or PromotionConfig()
    parent = registry.latest()
    serving = registry.get(parent) if parent else None
    base = (serving.items, serving.concepts) if serving else None
    data = windows(base, serving.model.n_categories if serving else None)
    cutoff_ms, horizon_ms = data.cutoff_ms, data.horizon_ms
    result = fine_tune(data, serving.model if serving else None, ft, family, model_kwargs)
    decision = judge(result, (serving.model, serving.items, serving.concepts) if serving else None, data, promotion)
    outcome, name = promote_or_reject(registry, result, decision, data, parent, promotion)
    log.info("cutoff %d: %s as %s (%s)", cutoff_ms, outcome, name, "; ".join(decision.reasons))
    cycle = CycleResult(cutoff_ms, horizon_ms, outcome, name, parent, decision.to_dict(), result.to_dict(),
                        data.window(), time.time() - started)
    if metrics is not None:
        metrics.observe(cycle)
    return cycle


class Trainer:
    """Watches the archive and runs cycles when due (see the module docstring)."""

    def __init__(self, archive: str, registry: ModelRegistry, horizon_ms: int, every_ms: int | None = None,
                 every_events: int | None = None, lateness_ms: int = 0, family: str = "dkt",
                 model_kwargs: dict | None = None, ft: FinetuneConfig | None = None,
                 promotion: PromotionConfig | None = None, metrics: FinetuneMetrics | None = None,
                 scan: ScanConfig | None = None, train_buffer_events: int = 2_000_000):
        if every_ms is None and every_events is None:
            raise ValueError("set every_ms (event time between cycles) or every_events, or both")
        self.archive, self.registry, self.horizon_ms = archive, registry, horizon_ms
        self.every_ms, self.every_events, self.lateness_ms = every_ms, every_events, lateness_ms
        self.family, self.model_kwargs, self.ft, self.promotion = family, model_kwargs, ft, promotion
        self.scan = scan  # DuckDB's limits for reading the archive (None: ScanConfig's defaults)
        self.train_buffer_events = train_buffer_events  # training positions held at once
        self.metrics = metrics or FinetuneMetrics()
        latest = registry.latest()
        # the last window tried, promoted or rejected: a restart does not retry a rejected window
        done = [registry.metrics(latest)["window"]["cutoff_ms"]] if latest else []
        done += [registry.rejected_report(name)["window"]["cutoff_ms"] for name in registry.rejected()]
        self.last_cutoff = max(done, default=None)
        self.rows_at_last = 0
        if latest:
            self.metrics.version.info({"version": latest})

    def next_cutoff(self) -> int | None:
        """The cutoff of the cycle due now, or None."""
        s = archive_summary(self.archive)
        if s["max_event_time_ms"] is None:
            return None
        cutoff = s["max_event_time_ms"] - self.lateness_ms - 2 * self.horizon_ms
        if cutoff <= s["min_event_time_ms"]:
            return None  # not one event before C yet
        if self.last_cutoff is None:
            return cutoff
        by_time = self.every_ms is not None and cutoff - self.last_cutoff >= self.every_ms
        by_count = self.every_events is not None and s["rows"] - self.rows_at_last >= self.every_events
        return cutoff if cutoff > self.last_cutoff and (by_time or by_count) else None

    def run_once(self) -> CycleResult | None:
        cutoff = self.next_cutoff()
        if cutoff is None:
            return None
        started = time.time()
        rows = archive_summary(self.archive)["rows"]
        try:
            def windows(base, n_categories):  # the archive in columns, the training window streamed
                return build_windows_from_archive(self.archive, cutoff, self.horizon_ms, base, n_categories,
                                                  cfg=self.scan, train_buffer_events=self.train_buffer_events)

            cycle = run_cycle(None, cutoff, self.horizon_ms, self.registry, self.family, self.model_kwargs,
                              self.ft, self.promotion, self.metrics, windows=windows)
        except Exception:
            self.metrics.failed(time.time() - started)
            raise
        finally:  # a failed cycle is not retried at the same cutoff; the next one comes at the next interval
            self.last_cutoff, self.rows_at_last = cutoff, rows
        return cycle

    def run(self, poll_s: float = 60.0, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Loop until ``should_stop``; a failed cycle is logged and counted, and the loop goes on."""
        while not should_stop():
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the service keeps running; the failure is counted and logged
                log.exception("fine-tuning cycle failed")
            deadline = time.monotonic() + poll_s
            while time.monotonic() < deadline and not should_stop():
                time.sleep(min(1.0, poll_s))
