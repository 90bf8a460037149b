"""The engine end to end on the real embedded broker: Kafka in, predictions and dead letters out.

One run per model family named here (DKT also with the engine on the confluent client; the classic
families and CL4KT/CORE have files of their own for their extras)
publishes valid events of many learners over several partitions,
prediction-only events, two twin learners (one with extra prediction-only
events) and malformed records; the engine runs as a service
(with its HTTP endpoints) until it has consumed everything; a reader collects
both output topics. The tests then check the run's outputs.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
import torch

from ktstream.engine.metrics import SERIES
from ktstream.models.checkpoint import ServingModel
from ktstream.schema import DeadLetter, Prediction
from tests.support.broker_run import engine_settings, publish, serve

pytestmark = pytest.mark.broker
PARTITIONS = 4


def twins():
    base = {"concept_ids": ["c1"]}
    a = [dict(base, learner_id="twin-a", event_id=f"a{i}", item_id=f"q{i % 5}", response=(i * 7) % 3 % 2,
              event_time=1_700_000_000_000 + 1000 * i) for i in range(12)]
    b = [dict(r, learner_id="twin-b", event_id=r["event_id"].replace("a", "b")) for r in a]
    asks = [dict(base, learner_id="twin-b", event_id=f"ask{i}", item_id="q3",
                 event_time=1_700_000_000_000 + 1000 * i + 500) for i in (2, 6)]
    return a + sorted(b + asks, key=lambda r: r["event_time"])


def malformed(valid):
    good = dict(valid)
    return {"invalid_json": b'{"event_id": "broken", ',
            "oversized": json.dumps({**good, "event_id": "big", "attributes": {"pad": "x" * 5000}}).encode(),
            "schema": json.dumps({**good, "event_id": "typed", "response": "right"}).encode(),
            "schema-extra": json.dumps({**good, "event_id": "extra", "colour": "blue"}).encode()}


FAMILIES = ["dkt", "dkvmn", "deep-irt", "atkt", "sparsekt", "diskt"]


@pytest.fixture(scope="module", params=[(name, "kafka-python") for name in FAMILIES] + [("dkt", "confluent")],
                ids=FAMILIES + ["dkt-confluent"])
def run(request, broker, kit):
    from connectors.kafka import output_sink_for, source_for

    name, client = request.param
    if client == "confluent":
        pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install -e "
                                                      "'.[kafka-native]'): the confluent client path is not tested")
    recs = kit.stream(n_learners=40, mean_length=12, seed=11, query_prob=0.1) + twins()
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(name, items, concepts, seed=1)
    s = engine_settings(broker, name, PARTITIONS, client=client, engine=dict(max_record_bytes=2048))
    t = s.kafka.topics
    bad = malformed(recs[0])
    payloads = []
    for i, r in enumerate(recs):
        payloads.append((r["learner_id"].encode(), json.dumps(r).encode()))
        if i % 50 == 25 and bad:  # malformed records between valid ones
            payloads.append((r["learner_id"].encode(), bad.popitem()[1]))
    publish(broker, s, payloads)

    def endpoints(service):
        base = f"http://{service.server.host}:{service.server.port}"
        return {path: urllib.request.urlopen(base + path).read().decode() for path in ("/metrics", "/healthz", "/readyz")}

    # the engine on the client under test; the harness on kafka-python
    out, error, http = serve(s, ServingModel(model, items, concepts, "v-test"), len(payloads),
                             topics=[t.predictions, t.dead_letters], source=source_for(s.kafka, max_poll_records=64),
                             sink=output_sink_for(s.kafka), inspect=endpoints)
    preds = [r for r in out if r.topic == t.predictions]
    dead = [r for r in out if r.topic == t.dead_letters]
    return dict(name=name, recs=recs, preds=preds, dead=dead, http=http, topics=t, error=error,
                reference=kit.offline(model, recs, items, concepts))


def test_exactly_one_prediction_per_valid_event(run):
    assert run["error"] is None
    ids = [Prediction.model_validate_json(r.value).event_id for r in run["preds"]]
    assert len(ids) == len(run["recs"]) and sorted(ids) == sorted(r["event_id"] for r in run["recs"])


def test_predictions_equal_the_offline_replay_and_keep_per_learner_order(run):
    order = {}
    for r in run["recs"]:
        order.setdefault(r["learner_id"], []).append(r["event_id"])
    seen = {}
    for rec in run["preds"]:
        p = Prediction.model_validate_json(rec.value)
        assert rec.key == p.learner_id.encode() and p.model_name == run["name"] and p.model_version == "v-test"
        assert p.source.topic == run["topics"].events
        seen.setdefault(p.learner_id, []).append(p.event_id)
        expected = run["reference"][p.event_id]
        assert torch.allclose(torch.tensor(p.probs), expected, atol=1e-6), (p.event_id, p.probs, expected)
        assert p.p_correct == p.probs[1]
    assert seen == order, "a learner's predictions must come out in its event order"


def test_malformed_records_are_dead_lettered_with_reasons(run):
    letters = [DeadLetter.model_validate_json(r.value) for r in run["dead"]]
    assert sorted(d.reason for d in letters) == ["invalid_json", "oversized", "schema", "schema"]
    assert all(d.source.topic == run["topics"].events and d.original for d in letters)
    details = " ".join(d.detail for d in letters)
    assert "colour" in details and "response" in details


def test_prediction_only_events_do_not_change_later_predictions(run):
    preds = {p.event_id: p for p in (Prediction.model_validate_json(r.value) for r in run["preds"])}
    for i in range(12):
        a, b = torch.tensor(preds[f"a{i}"].probs), torch.tensor(preds[f"b{i}"].probs)
        assert torch.allclose(a, b, atol=1e-6), f"position {i}: the twin with queries differs"  # batch mates differ
    assert preds["ask2"].p_correct is not None


def test_metrics_endpoint_serves_the_documented_series(run):
    text = run["http"]["/metrics"]
    for name in SERIES:
        assert name in text, f"{name} missing from /metrics"
    n = len(run["recs"])
    assert f"ktstream_events_consumed_total {float(n + 4)}" in text
    assert f"ktstream_predictions_produced_total {float(n)}" in text
    assert 'ktstream_dead_letters_total{reason="schema"} 2.0' in text
    assert 'ktstream_rebalances_total{kind="assigned"} 4.0' in text
    assert "ktstream_consumer_lag_records{" in text
    assert run["http"]["/healthz"].strip() == "alive" and run["http"]["/readyz"].strip() == "ready"
