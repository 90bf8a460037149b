"""The classic families (bkt, irt-pfa) served end to end on the real embedded broker: every event
gets one prediction, equal to the offline replay of the serving path, with the family's extras
(mastery of the event's concepts; irt-pfa's ability)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import torch

from ktstream.config import load_settings
from ktstream.core import Output
from ktstream.models.checkpoint import ServingModel
from ktstream.schema import Prediction
from ktstream.service import Service

pytestmark = pytest.mark.broker
PARTITIONS = 3


def read(source, until, timeout_s=60.0):
    got = []
    deadline = time.monotonic() + timeout_s
    while not until(got) and time.monotonic() < deadline:
        got.extend(source.poll(0.2, 1000))
    return got


@pytest.fixture(scope="module", params=["bkt", "irt-pfa"])
def run(request, broker, kit):
    from connectors.kafka import KafkaSink, KafkaSource

    name = request.param
    recs = kit.stream(n_learners=30, mean_length=12, seed=13, query_prob=0.1)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(name, items, concepts, seed=1)
    tag = f"{name}-{uuid.uuid4().hex[:6]}"
    s = load_settings(None, kafka=dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"engine-{tag}",
                                       session_timeout_ms=6000, partitions=PARTITIONS,
                                       topics=dict(events=f"{tag}.ev", predictions=f"{tag}.pred",
                                                   dead_letters=f"{tag}.dead")),
                      engine=dict(max_batch=64, poll_timeout_ms=20, gc_tuning=False), metrics=dict(port=0))
    t = s.kafka.topics
    broker.create_topics([t.events, t.predictions, t.dead_letters], PARTITIONS)
    sink = KafkaSink(s.kafka)
    for r in recs:
        sink.send([Output(t.events, r["learner_id"].encode(), json.dumps(r).encode())])
    sink.flush(30)
    sink.close()
    service = Service(s, ServingModel(model, items, concepts, "v-test"), KafkaSource(s.kafka, max_poll_records=64),
                      KafkaSink(s.kafka))
    service.start(until=lambda: service.metrics.totals["consumed"] >= len(recs))
    reader = KafkaSource(s.kafka.model_copy(update={"group_id": f"reader-{tag}"}), topics=[t.predictions])
    out = read(reader, lambda got: len(got) >= len(recs))
    out += read(reader, lambda got: False, timeout_s=1.0)  # anything beyond one output per input?
    service.join(30)
    service.close()
    reader.close()
    return dict(name=name, recs=recs, preds=[Prediction.model_validate_json(r.value) for r in out],
                error=service.error, reference=kit.offline(model, recs, items, concepts))


def test_one_prediction_per_event_equal_to_the_offline_replay(run):
    assert run["error"] is None
    assert sorted(p.event_id for p in run["preds"]) == sorted(r["event_id"] for r in run["recs"])
    for p in run["preds"]:
        assert p.model_name == run["name"]
        assert torch.allclose(torch.tensor(p.probs), run["reference"][p.event_id], atol=1e-6), p.event_id


def test_predictions_carry_the_mastery_of_the_events_concepts(run):
    recs = {r["event_id"]: r for r in run["recs"]}
    for p in run["preds"]:
        tagged = set(recs[p.event_id].get("concept_ids") or ())
        assert set(p.mastery or {}) == tagged, p.event_id
        assert all(0.0 < v < 1.0 for v in (p.mastery or {}).values())
        assert (p.ability is not None) == (run["name"] == "irt-pfa")
