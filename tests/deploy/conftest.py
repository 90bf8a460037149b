"""Fixtures for the deployment checks: a live /metrics scrape of the engine and of the trainer.

The scrape runs the real engine (``ktstream.service.Service``, HTTP
server included, port 0) over an in-memory source holding a small simulated
stream plus a malformed record, so every series the engine exports has samples;
and the trainer's registry (``ktstream.finetune.metrics.FinetuneMetrics``)
through the same server (``FinetuneMetrics.serve``), after one made-up cycle.
"""

from __future__ import annotations

import json
import urllib.request
import zlib

import pytest
import torch
from tests.deploy.deploy_support import scrape


def _engine_records(topic: str):
    from ktstream.core import Record
    from ktstream.data.simulate import simulate
    from ktstream.engine.replay import replay_order

    events = replay_order(simulate(n_learners=12, mean_length=12, seed=3, start_spread_ms=60_000))
    offsets, out = [0, 0], []
    for r in events:
        p = zlib.crc32(r["learner_id"].encode()) % 2
        out.append(Record(topic, p, offsets[p], r["learner_id"].encode(), json.dumps(r).encode(), 0))
        offsets[p] += 1
    out.append(Record(topic, 0, offsets[0], b"u0", b'{"event_id": "broken", ', 0))  # -> a dead letter
    return events, out


@pytest.fixture(scope="session")
def live_series():
    """{"engine": samples, "trainer": samples, "health" / "trainer_health": {path: status}} from live HTTP
    scrapes."""
    from ktstream.config import load_settings
    from ktstream.data.histories import build_vocabularies
    from ktstream.engine.records import MemorySink, MemorySource
    from ktstream.finetune.metrics import FinetuneMetrics
    from ktstream.finetune.scheduler import CycleResult
    from ktstream.models import create, family
    from ktstream.models.checkpoint import ServingModel
    from ktstream.service import Service

    # gc_tuning off: the engine would take over the garbage collector of the whole (pytest) process
    settings = load_settings(None, metrics={"host": "127.0.0.1", "port": 0}, engine={"gc_tuning": False})
    events, records = _engine_records(settings.kafka.topics.events)
    items, concepts = build_vocabularies(events)
    torch.manual_seed(0)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), **family("dkt").tiny_config).eval()
    source = MemorySource(records)
    service = Service(settings, ServingModel(model, items, concepts, "v-test"), source, MemorySink())
    try:
        service.start(until=lambda: not source.pending)  # the engine loop, as `ktstream serve` runs it
        service.join(120)
        assert service.error is None, f"the engine loop failed: {service.error!r}"
        base = f"http://127.0.0.1:{service.server.port}"
        engine = scrape(base + "/metrics")
        health = {p: urllib.request.urlopen(base + p, timeout=10).status for p in ("/healthz", "/readyz")}
    finally:
        service.close()

    fm = FinetuneMetrics()
    comparison = {"metric": "auc", "candidate": 0.74, "serving": 0.72, "ci_low": 0.004}
    fm.observe(CycleResult(1_700_000_000_000, 86_400_000, "promoted", "v000002", "v000001",
                           {"comparison": comparison}, {}, {}, 12.0))
    fm.failed(5.0)
    server = fm.serve(0)  # what `ktstream trainer` runs
    try:
        trainer = scrape(f"{server.url}/metrics")
        trainer_health = {p: urllib.request.urlopen(server.url + p, timeout=10).status for p in ("/healthz", "/readyz")}
    finally:
        server.close()
    return {"engine": engine, "trainer": trainer, "archive": _archive_scrape(records), "health": health,
            "trainer_health": trainer_health}


def _archive_scrape(records) -> dict:
    """The archiver's /metrics after it archived ``records`` (one malformed: a dead letter)."""
    import tempfile

    from connectors.archive import ArchiveSettings, ArchiveWriter, Archiver, serve_metrics
    from ktstream.engine.records import MemorySink, MemorySource

    with tempfile.TemporaryDirectory() as folder:
        settings = ArchiveSettings(folder=folder, metrics_port=0)
        archiver = Archiver(MemorySource(records), ArchiveWriter(folder, flush_records=10_000), MemorySink(),
                            settings)
        server = serve_metrics(archiver, settings)
        try:
            while archiver.step(0.0, 1000):
                pass
            archiver.flush()
            return scrape(f"{server.url}/metrics")
        finally:
            server.close()
