"""CL4KT and CORE served by the engine: on the embedded broker (Kafka in, predictions out, equal to the
offline replay), and CORE around a windowed base through the in-memory engine (its state is the base's
key/value cache, laid out by the windowed layout)."""

from __future__ import annotations

import json
import uuid

import pytest
import torch

from ktstream.config import load_settings
from ktstream.core import Output
from ktstream.models import create
from ktstream.models.checkpoint import ServingModel
from ktstream.schema import Prediction
from ktstream.service import Service
from tests.engine.test_engine_broker import read

PARTITIONS = 2
SAKT_BASE = {"base": "sakt", "base_config": {"dim": 8, "heads": 2, "window": 6, "ffn": 16}, "bias_dim": 8}


def windowed_core(items, concepts):
    torch.manual_seed(0)
    return create("core", n_items=len(items), n_concepts=len(concepts), **SAKT_BASE).eval()


@pytest.mark.parametrize("max_batch", [1, 37])
def test_core_around_a_windowed_base_streams_as_it_replays(kit, max_batch):
    recs = kit.stream(n_learners=12, mean_length=16, seed=4)
    items, concepts = kit.build_vocabularies(recs[: len(recs) // 2])
    model = windowed_core(items, concepts)
    reference = kit.offline(model, recs, items, concepts)
    engine, source, sink = kit.memory_engine(model, items, concepts, kit.as_records(recs), max_batch=max_batch)
    kit.drain(engine, source)
    preds = kit.outputs(sink, kit.PREDICTIONS)
    assert sorted(p["event_id"] for p in preds) == sorted(r["event_id"] for r in recs)
    for p in preds:
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]
        assert len(p["extras"]["biased_probs"]) == 2 and p["model_name"] == "core"
    assert not kit.outputs(sink, kit.DEAD)


@pytest.fixture(scope="module", params=["cl4kt", "core", "core-sakt"])
def run(request, broker, kit):
    from connectors.kafka import KafkaSink, KafkaSource

    name = request.param
    recs = kit.stream(n_learners=20, mean_length=10, seed=12, query_prob=0.1)
    items, concepts = kit.build_vocabularies(recs)
    model = windowed_core(items, concepts) if name == "core-sakt" else kit.tiny_model(name, items, concepts, seed=1)
    tag = f"{name}-{uuid.uuid4().hex[:6]}"
    s = load_settings(None, kafka=dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"engine-{tag}",
                                       session_timeout_ms=6000, partitions=PARTITIONS,
                                       topics=dict(events=f"{tag}.ev", predictions=f"{tag}.pred",
                                                   dead_letters=f"{tag}.dead")),
                      engine=dict(max_batch=64, max_record_bytes=2048, poll_timeout_ms=20, gc_tuning=False),
                      metrics=dict(port=0))
    t = s.kafka.topics
    broker.create_topics([t.events, t.predictions, t.dead_letters], PARTITIONS)
    sink = KafkaSink(s.kafka)
    sink.send([Output(t.events, r["learner_id"].encode(), json.dumps(r).encode()) for r in recs])
    sink.flush(30)
    sink.close()
    service = Service(s, ServingModel(model, items, concepts, "v-test"), KafkaSource(s.kafka, max_poll_records=64),
                      KafkaSink(s.kafka))
    service.start(until=lambda: service.metrics.totals["consumed"] >= len(recs))
    reader = KafkaSource(s.kafka.model_copy(update={"group_id": f"reader-{tag}"}), topics=[t.predictions])
    out = read(reader, lambda got: len(got) >= len(recs))
    out += read(reader, lambda got: False, timeout_s=1.0)
    service.join(30)
    service.close()
    reader.close()
    return dict(name=name, recs=recs, preds=out, error=service.error,
                reference=kit.offline(model, recs, items, concepts))


@pytest.mark.broker
def test_one_prediction_per_event_equal_to_the_offline_replay(run):
    assert run["error"] is None
    preds = [Prediction.model_validate_json(r.value) for r in run["preds"]]
    assert sorted(p.event_id for p in preds) == sorted(r["event_id"] for r in run["recs"])
    for p in preds:
        assert p.model_name == run["name"].split("-")[0]
        assert torch.allclose(torch.tensor(p.probs), run["reference"][p.event_id], atol=1e-6), p.event_id
