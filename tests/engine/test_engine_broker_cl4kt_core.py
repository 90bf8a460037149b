"""CL4KT and CORE served by the engine: on the embedded broker (Kafka in, predictions out, equal to the
offline replay), and CORE around a windowed base through the in-memory engine (its state is the base's
key/value cache, laid out by the windowed layout)."""

from __future__ import annotations

import json

import pytest
import torch

from ktstream.models import create
from ktstream.models.checkpoint import ServingModel
from ktstream.schema import Prediction
from tests.support.broker_run import engine_settings, publish, serve

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
    name = request.param
    recs = kit.stream(n_learners=20, mean_length=10, seed=12, query_prob=0.1)
    items, concepts = kit.build_vocabularies(recs)
    model = windowed_core(items, concepts) if name == "core-sakt" else kit.tiny_model(name, items, concepts, seed=1)
    s = engine_settings(broker, name, PARTITIONS, engine=dict(max_record_bytes=2048))
    publish(broker, s, [(r["learner_id"].encode(), json.dumps(r).encode()) for r in recs])
    out, error, _ = serve(s, ServingModel(model, items, concepts, "v-test"), len(recs))
    return dict(name=name, recs=recs, preds=out, error=error, reference=kit.offline(model, recs, items, concepts))


@pytest.mark.broker
def test_one_prediction_per_event_equal_to_the_offline_replay(run):
    assert run["error"] is None
    preds = [Prediction.model_validate_json(r.value) for r in run["preds"]]
    assert sorted(p.event_id for p in preds) == sorted(r["event_id"] for r in run["recs"])
    for p in preds:
        assert p.model_name == run["name"].split("-")[0]
        assert torch.allclose(torch.tensor(p.probs), run["reference"][p.event_id], atol=1e-6), p.event_id
