"""A model swap under live traffic on the real embedded broker (issue: fine-tuning, hot swap).

The service serves version 1 from a model registry while a producer keeps
publishing events; once a third of the predictions are out, version 2 (other
weights, vocabularies from less data) is promoted into the registry. The
engine must pick it up between micro-batches without losing or repeating a
prediction, never go back to version 1 on a partition, and every prediction
must equal (1e-6) what its version's model computes over the learner's whole
history (states rebuilt from the raw windows, not restarted).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid

import pytest
import torch

from ktstream.cli.serve import load_model
from ktstream.config import load_settings
from ktstream.core import Output
from ktstream.finetune.registry import ModelRegistry
from ktstream.schema import Prediction
from ktstream.service import Service

pytestmark = pytest.mark.broker
PARTITIONS = 3


def test_swap_under_live_traffic(broker, kit, tmp_path):
    from connectors.kafka import KafkaSink, KafkaSource

    recs = kit.stream(n_learners=40, mean_length=16, seed=21, query_prob=0.1)
    items, concepts = kit.build_vocabularies(recs)
    new_items, new_concepts = kit.build_vocabularies(recs[: len(recs) // 3])
    models = {"v000001": (kit.tiny_model("dkt", items, concepts, seed=1), items, concepts),
              "v000002": (kit.tiny_model("dkt", new_items, new_concepts, seed=2), new_items, new_concepts)}
    registry = ModelRegistry(tmp_path / "registry")
    registry.publish(*models["v000001"], {"note": "first"})
    tag = f"swap-{uuid.uuid4().hex[:6]}"
    s = load_settings(None, kafka=dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"engine-{tag}",
                                       session_timeout_ms=6000, partitions=PARTITIONS,
                                       topics=dict(events=f"{tag}.ev", predictions=f"{tag}.pred",
                                                   dead_letters=f"{tag}.dead")),
                      engine=dict(max_batch=32, poll_timeout_ms=20, gc_tuning=False),
                      metrics=dict(port=0),
                      model=dict(family="dkt", registry=str(tmp_path / "registry"), registry_poll_s=0.05))
    t = s.kafka.topics
    broker.create_topics([t.events, t.predictions, t.dead_letters], PARTITIONS)
    serving = load_model(s.model)
    assert serving.version == "v000001"
    service = Service(s, serving, KafkaSource(s.kafka, max_poll_records=32), KafkaSink(s.kafka))
    service.start(until=lambda: service.metrics.totals["consumed"] >= len(recs))

    promoted = threading.Event()

    def produce() -> None:
        """Paced publishing throughout; the last 40% only once version 2 is in the registry, so the swap
        always lands while traffic is still flowing (however fast the engine drains the first part)."""
        sink = KafkaSink(s.kafka)
        for i in range(0, len(recs), 10):
            if i >= 0.6 * len(recs):
                promoted.wait(60)
            sink.send([Output(t.events, r["learner_id"].encode(), json.dumps(r).encode()) for r in recs[i:i + 10]])
            sink.flush(30)
            time.sleep(0.03)
        sink.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    reader = KafkaSource(s.kafka.model_copy(update={"group_id": f"reader-{tag}"}), topics=[t.predictions])
    got, promoted_at = [], None
    deadline = time.monotonic() + 120
    while len(got) < len(recs) and time.monotonic() < deadline:
        got.extend(reader.poll(0.2, 1000))
        if promoted_at is None and len(got) >= len(recs) // 3:
            promoted_at = len(got)
            registry.publish(*models["v000002"], {"note": "second"})
            promoted.set()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # anything beyond one prediction per event?
        got.extend(reader.poll(0.2, 1000))
    producer.join(30)
    service.join(30)
    scraped = urllib.request.urlopen(f"http://{service.server.host}:{service.server.port}/metrics").read().decode()
    service.close()
    reader.close()
    assert service.error is None and promoted_at is not None

    preds = [Prediction.model_validate_json(r.value) for r in got]
    sources = [(p.source.partition, p.source.offset) for p in preds]
    assert len(sources) == len(set(sources)) == len(recs), "exactly one prediction per event"
    assert sorted(p.event_id for p in preds) == sorted(r["event_id"] for r in recs)
    by_partition: dict[int, list] = {}
    for p in sorted(preds, key=lambda p: (p.source.partition, p.source.offset)):
        by_partition.setdefault(p.source.partition, []).append(p.model_version)
    for part, versions in by_partition.items():
        assert versions == sorted(versions), f"partition {part} went back to an older version"
    counts = {v: sum(p.model_version == v for p in preds) for v in models}
    assert counts["v000001"] > 0 and counts["v000002"] >= len(recs) // 4, counts
    refs = {v: kit.offline(m, recs, i, c) for v, (m, i, c) in models.items()}
    for p in preds:
        expected = refs[p.model_version][p.event_id]
        assert torch.allclose(torch.tensor(p.probs), expected, atol=1e-6), (p.event_id, p.model_version)
    assert "ktstream_model_swaps_total 1.0" in scraped
    assert 'version="v000002"' in scraped
