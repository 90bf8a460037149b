"""The classic families (bkt, irt-pfa) served end to end on the real embedded broker: every event
gets one prediction, equal to the offline replay of the serving path, with the family's extras
(mastery of the event's concepts; irt-pfa's ability)."""

from __future__ import annotations

import json

import pytest
import torch

from ktstream.models.checkpoint import ServingModel
from ktstream.schema import Prediction
from tests.support.broker_run import engine_settings, publish, serve

pytestmark = pytest.mark.broker
PARTITIONS = 3


@pytest.fixture(scope="module", params=["bkt", "irt-pfa"])
def run(request, broker, kit):
    name = request.param
    recs = kit.stream(n_learners=30, mean_length=12, seed=13, query_prob=0.1)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(name, items, concepts, seed=1)
    s = engine_settings(broker, name, PARTITIONS)
    publish(broker, s, [(r["learner_id"].encode(), json.dumps(r).encode()) for r in recs])
    out, error, _ = serve(s, ServingModel(model, items, concepts, "v-test"), len(recs))
    return dict(name=name, recs=recs, preds=[Prediction.model_validate_json(r.value) for r in out],
                error=error, reference=kit.offline(model, recs, items, concepts))


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
