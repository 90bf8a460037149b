"""Waves (a learner at most once, order kept), duplicates, and the late-event policy."""

from __future__ import annotations

import json

import math

import pytest
import torch

from ktstream.core import LearnerState, Record
from ktstream.data.histories import NO_RESPONSE
from ktstream.data.vocab import UNKNOWN, Vocabulary
from ktstream.engine.batcher import Planned, plan
from ktstream.engine.decode import decode
from ktstream.models import create
from ktstream.serving.runner import ModelRunner


def ev(lid, offset, t=None, partition=0):
    body = {"event_id": f"{lid}{offset}", "learner_id": lid, "item_id": "q1", "response": 1}
    if t is not None:
        body["event_time"] = t
    return decode(Record("ev", partition, offset, lid.encode(), json.dumps(body).encode()), 4096)


def test_waves_hold_each_learner_once_in_arrival_order():
    events = [ev("a", 0, 1), ev("a", 1, 2), ev("b", 2, 1), ev("a", 3, 3), ev("c", 4, 9), ev("b", 5, 2)]
    learners = {u: LearnerState(u, {}, "v") for u in "abc"}
    waves = plan(events, learners, "dead-letter").waves
    for wave in waves:
        ids = [p.decoded.event.learner_id for p in wave]
        assert len(ids) == len(set(ids))
    flat = {}
    for wave in waves:
        for p in wave:
            flat.setdefault(p.decoded.event.learner_id, []).append(p.decoded.record.offset)
    assert flat == {"a": [0, 1, 3], "b": [2, 5], "c": [4]}
    assert [len(w) for w in waves] == [3, 2, 1]


def test_encode_pads_ragged_concepts_and_maps_unknown_ids():
    """A wave's events as model inputs: concepts left-aligned and padded with 0 (ragged, none at all),
    unknown item and concept ids -> UNKNOWN, a prediction request -> NO_RESPONSE, no time -> NaN."""
    bodies = [{"item_id": "q2", "concept_ids": ["c2", "c1"], "response": 0, "event_time": 1_500},
              {"item_id": "new", "concept_ids": [], "event_time": 2_000},
              {"item_id": "q1", "concept_ids": ["c9", "c1", "c2"], "response": 1},
              {"item_id": "q1", "concept_ids": ["c1"], "response": 2, "event_time": "1970-01-01T00:00:03Z"}]
    wave = [Planned(decode(Record("ev", 0, i, b"u", json.dumps({"event_id": f"e{i}", "learner_id": "u", **b})
                                  .encode()), 4096), LearnerState("u", {}, "v")) for i, b in enumerate(bodies)]
    runner = ModelRunner(create("dkt", n_items=4, n_concepts=4, dim=4, hidden=4), Vocabulary(["q1", "q2"]),
                         Vocabulary(["c1", "c2"]), "v")
    x = runner.encode(wave)
    assert x.items.tolist() == [3, UNKNOWN, 2, 2]
    assert x.concepts.tolist() == [[3, 2, 0], [0, 0, 0], [UNKNOWN, 2, 3], [2, 0, 0]]
    assert x.responses.tolist() == [0, NO_RESPONSE, 1, 2]
    times = x.times.tolist()
    assert times[0] == 1.5 and times[1] == 2.0 and math.isnan(times[2]) and times[3] == 3.0
    assert [t.dtype for t in (x.items, x.concepts, x.responses, x.times)] == [torch.long] * 3 + [torch.float64]
    same = runner.encode(wave[3:])  # one concept each: no padding
    assert same.concepts.tolist() == [[2]] and same.items.tolist() == [2]


def test_redelivered_offsets_are_skipped():
    st = LearnerState("a", {}, "v", partition=("ev", 0), last_offset=4, last_event_time_ms=10)
    p = plan([ev("a", 3, 11), ev("a", 4, 12), ev("a", 5, 13)], {"a": st}, "dead-letter")
    assert [d.record.offset for d in p.duplicates] == [3, 4]
    assert [w[0].decoded.record.offset for w in p.waves] == [5]


@pytest.mark.parametrize("policy", ["dead-letter", "apply"])
def test_late_policy(policy, kit):
    base = {"learner_id": "u", "item_id": "q1", "concept_ids": ["c1"], "response": 1}
    recs = [dict(base, event_id="a", event_time=5000), dict(base, event_id="b", event_time=9000),
            dict(base, event_id="late", event_time=7000), dict(base, event_id="no-clock"),
            dict(base, event_id="c", event_time=9000)]
    items, concepts = kit.build_vocabularies(recs)
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                             kit.as_records(recs), max_batch=2, late_policy=policy)
    kit.drain(engine, source)
    preds = {p["event_id"]: p for p in kit.outputs(sink, kit.PREDICTIONS)}
    dead = kit.outputs(sink, kit.DEAD)
    assert not preds["no-clock"]["late"], "an event without event time is never late"
    if policy == "dead-letter":
        assert [d["reason"] for d in dead] == ["late"] and "late" not in preds
        assert engine.metrics.totals["dead:late"] == 1 and engine.cache.get("u").responses == 4
    else:
        assert not dead and preds["late"]["late"] and not preds["c"]["late"]
        assert engine.metrics.totals["late_applied"] == 1 and engine.cache.get("u").late == 1
        assert engine.cache.get("u").last_event_time_ms == 9000, "a late event does not move the clock back"
    text = engine.metrics.exposition().decode()
    action = "dead_lettered" if policy == "dead-letter" else "applied"
    assert f'ktstream_late_events_total{{action="{action}"}} 1.0' in text
