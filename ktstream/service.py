"""The engine as a service: built from settings, with its HTTP endpoints, stoppable from a signal.

It sits above the engine, durable state (ktstream.state) and the model registry
(ktstream.finetune.registry, read only): it is where they are put together.

``Service`` wires a source and a sink (connectors/, chosen by the caller), the
serving model, the state cache, the metrics and the HTTP server together, and
runs the engine loop on the calling thread (``run``) or a background thread
(``start``). ``stop()`` only sets an event, so it is safe in a signal handler;
the loop finishes its current micro-batch (commit included) and returns.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch

from ktstream.config import EngineSettings, Settings
from ktstream.engine.collector import BatchCollector
from ktstream.engine.engine import Engine
from ktstream.engine.metrics import EngineMetrics
from ktstream.engine.processor import Processor
from ktstream.engine.queries import LearnerQueries
from ktstream.engine.records import Sink, Source
from ktstream.engine.server import MetricsServer
from ktstream.engine.state_cache import StateCache
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.watcher import RegistryWatcher
from ktstream.malloc import tune_malloc
from ktstream.models.checkpoint import ServingModel
from ktstream.serving.runner import ModelRunner
from ktstream.state.store import Store
from ktstream.state.wiring import durable_state


def build_engine(settings: Settings, serving: ServingModel, source: Source, sink: Sink,
                 store: Store | None = None) -> Engine:
    """The engine; with ``state.dir`` set (or a ``store`` given) over durable state: a store per input
    partition, changelog records in every batch, restore on assignment (ktstream.state.wiring). The
    processing guarantee follows the sink: a transactional sink commits each batch in one transaction."""
    e, k, m = settings.engine, settings.kafka, settings.metrics
    runner = ModelRunner(serving.model, serving.items, serving.concepts, serving.version, e.describe)
    metrics = EngineMetrics(m.quality_window, m.calibration_bins)
    state = None
    if settings.state.dir is not None or store is not None:
        state = durable_state(settings, metrics, source, sink, store)
    processor = Processor(runner, StateCache(e.cache_max_bytes, state), k.topics.predictions,
                          k.topics.dead_letters, e.late_policy, e.max_record_bytes, e.rebuild_window,
                          max_clock_skew_s=e.max_clock_skew_s, window_bytes=e.rebuild_window_bytes)
    engine = Engine(source, sink, processor, metrics, e.max_batch, e.poll_timeout_ms / 1000.0, e.flush_timeout_s,
                    rebuild_chunk=e.rebuild_chunk, collector=collector_for(e),
                    max_output_bytes=e.max_output_record_bytes, max_batch_retries=e.max_batch_retries, state=state,
                    overlap_delivery=e.overlap_delivery)
    if settings.model.registry is not None:  # hot swap: newly promoted versions are served between micro-batches
        registry = ModelRegistry(settings.model.registry, read_only=True)
        engine.watch(RegistryWatcher(registry, engine.swap, current=serving.version,
                                     interval_s=settings.model.registry_poll_s,
                                     on_load_error=lambda version, exc: metrics.model_load_failures.inc()))
    return engine


def collector_for(engine: EngineSettings) -> BatchCollector | None:
    """The engine's own garbage collection between micro-batches, when ``gc_tuning`` asks for it."""
    return BatchCollector(engine.gc_young_objects, engine.gc_full_interval_s) if engine.gc_tuning else None


def tune_process(engine: EngineSettings) -> None:
    """The process tuning the engine's settings ask for (``malloc_tuning``; the garbage collector is
    the engine's own, ``collector_for``); the benches call it too, so that they measure the service
    as it runs."""
    if engine.malloc_tuning:
        tune_malloc()


class Service:
    def __init__(self, settings: Settings, serving: ServingModel, source: Source, sink: Sink, http: bool = True):
        torch.set_num_threads(settings.engine.torch_threads)
        self.settings = settings
        self.engine = build_engine(settings, serving, source, sink)
        self.server: MetricsServer | None = None
        self.queries: LearnerQueries | None = None
        if http:
            m, q = self.engine.metrics, settings.queries
            if q.enabled:  # /learners/{id} and /instances, answered by the engine loop (ktstream.engine.queries)
                self.queries = self.engine.queries = LearnerQueries(q.advertised_url, q.peers, q.max_concepts,
                                                                    q.timeout_s)
            self.server = MetricsServer(m.registry, self.engine.healthy, self.engine.ready,
                                        settings.metrics.host, settings.metrics.port,
                                        routes=self.queries.routes() if self.queries is not None else None)
            if self.queries is not None and self.queries.url is None:
                self.queries.url = self.server.url
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def metrics(self) -> EngineMetrics:
        return self.engine.metrics

    def run(self, until: Callable[[], bool] | None = None) -> None:
        tune_process(self.settings.engine)
        try:
            self.engine.run(self._stop, until)
        except BaseException as exc:
            self.error = exc
            raise

    def start(self, until: Callable[[], bool] | None = None) -> threading.Thread:
        def target() -> None:
            try:
                self.run(until)
            except BaseException:  # recorded in self.error; the caller checks after join()
                pass

        self._thread = threading.Thread(target=target, name="ktstream-engine", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def close(self) -> None:
        """Stop the loop, wait for it, close the clients and the HTTP server."""
        self.stop()
        self.join(30)
        self.engine.close()
        if self.engine.state is not None:
            self.engine.state.close()
        if self.server is not None:
            self.server.close()

    def __enter__(self) -> "Service":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
