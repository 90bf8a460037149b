"""Invalid input is dead-lettered with the original bytes, a reason and its source; valid input flows."""

from __future__ import annotations

import base64
import json

import pytest
import torch

from ktstream.core import Record
from ktstream.engine.decode import Decoded, Rejected, decode
from ktstream.schema import MAX_ATTRIBUTES_BYTES, MAX_CONCEPTS, MAX_ID_BYTES, MAX_INT64, DeadLetter, Prediction

GOOD = {"event_id": "e1", "learner_id": "u1", "item_id": "q1", "response": 1, "event_time": 1_700_000_000_000}


def rec(value: bytes, key: bytes | None = b"u1", offset: int = 3) -> Record:
    return Record("ev", 2, offset, key, value)


@pytest.mark.parametrize("value,reason,fragment", [
    (b'{"event_id": "e1", ', "invalid_json", "not UTF-8 JSON"),
    (b"\xff\xfe\x00", "invalid_json", "not UTF-8 JSON"),
    (b"[1, 2]", "invalid_json", "expected a JSON object"),
    (json.dumps({**GOOD, "response": "yes"}).encode(), "schema", "response"),
    (json.dumps({**GOOD, "response": True}).encode(), "schema", "response"),
    (json.dumps({**GOOD, "colour": "blue"}).encode(), "schema", "colour"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "item_id"}).encode(), "schema", "item_id"),
    (json.dumps({**GOOD, "event_time": "yesterday"}).encode(), "schema", "event_time"),
    (json.dumps({**GOOD, "attributes": {"x": "y" * 600}}).encode(), "oversized", "limit is 512"),
])
def test_rejections_name_their_reason(value, reason, fragment):
    out = decode(rec(value), max_bytes=512)
    assert isinstance(out, Rejected), f"{value[:40]!r} was accepted"
    assert out.reason == reason and fragment in out.detail, (out.reason, out.detail)


def nested(depth: int) -> str:
    """JSON text of ``depth`` nested objects."""
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("fields,fragment", [
    ({"seq": MAX_INT64 + 1}, "seq"),
    ({"elapsed_ms": MAX_INT64 + 1}, "elapsed_ms"),
    ({"event_time": "9999-12-31T23:00:00-05:00"}, "outside UTC years 1..9999"),
    ({"event_time": "0001-01-01T00:00:00+05:00"}, "outside UTC years 1..9999"),
    ({"event_time": 10**15}, "event_time in epoch milliseconds"),
    ({"event_time": -10**15}, "event_time in epoch milliseconds"),
    ({"learner_id": "é" * 129}, "learner_id must be 1..256 bytes"),
    ({"item_id": "q" * (MAX_ID_BYTES + 1)}, "item_id"),
    ({"event_id": "e" * (MAX_ID_BYTES + 1)}, "event_id"),
    ({"step_id": "s" * (MAX_ID_BYTES + 1)}, "step_id"),
    ({"concept_ids": ["c" * (MAX_ID_BYTES + 1)]}, "each concept id"),
    ({"concept_ids": [f"c{i}" for i in range(MAX_CONCEPTS + 1)]}, "concept_ids"),
    ({"attributes": {"x": "y" * MAX_ATTRIBUTES_BYTES}}, "attributes are"),
])
def test_the_schema_bounds_every_field(fields, fragment):
    """Each field's bound holds at the schema, so no later stage (archive columns, datetimes) meets the value."""
    value = json.dumps({**GOOD, **fields}).encode()
    out = decode(rec(value, key=fields.get("learner_id", "u1").encode()), max_bytes=1 << 20)
    assert isinstance(out, Rejected) and out.reason == "schema" and fragment in out.detail, out


@pytest.mark.parametrize("depth", [9, 1000, 1023, 5000])
def test_deep_attributes_are_rejected_without_recursion(depth):
    value = ('{"event_id":"e1","learner_id":"u1","item_id":"q1","attributes":%s}' % nested(depth)).encode()
    out = decode(rec(value), max_bytes=1 << 20)
    assert isinstance(out, Rejected) and out.reason in ("schema", "invalid_json"), out


def test_values_at_the_bounds_are_accepted():
    at_bounds = {**GOOD, "seq": MAX_INT64, "elapsed_ms": MAX_INT64, "event_time": "9999-12-31T23:59:59Z",
                 "learner_id": "é" * (MAX_ID_BYTES // 2), "concept_ids": ["c" * MAX_ID_BYTES] * MAX_CONCEPTS,
                 "attributes": json.loads(nested(8))}
    out = decode(rec(json.dumps(at_bounds).encode(), key=at_bounds["learner_id"].encode()), 1 << 20)
    assert isinstance(out, Decoded), out
    assert out.event.to_record()["seq"] == MAX_INT64


def test_key_must_be_the_learner_id():
    assert decode(rec(json.dumps(GOOD).encode(), key=b"someone-else"), 4096).reason == "key_mismatch"
    missing = decode(rec(json.dumps(GOOD).encode(), key=None), 4096)
    assert missing.reason == "missing_key" and "'u1'" in missing.detail


def test_events_past_the_clock_and_its_skew_are_future():
    now = 1_700_000_000_000
    for event_time, reason in ((now + 1, "future"), ("9999-01-01T00:00:00Z", "future"), (now, None)):
        out = decode(rec(json.dumps({**GOOD, "event_time": event_time}).encode()), 4096, not_after_ms=now)
        assert getattr(out, "reason", None) == reason, out


def test_dead_letters_carry_original_bytes_and_source(kit):
    recs = kit.stream(n_learners=4, mean_length=6, seed=2, query_prob=0.0)
    bad = {1: b"{not json", 3: json.dumps({**recs[3], "colour": "red"}).encode(),
           5: json.dumps({**recs[5], "response": "x"}).encode(), 7: json.dumps({**recs[7], "pad": "z" * 5000}).encode()}
    items, concepts = kit.build_vocabularies(recs)
    records = kit.as_records(recs, raw=bad)
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts, records)
    kit.drain(engine, source)
    dead = [DeadLetter.model_validate(d) for d in kit.outputs(sink, kit.DEAD)]
    assert sorted(d.reason for d in dead) == ["invalid_json", "oversized", "schema", "schema"]
    by_offset = {(r.partition, r.offset): r for r in records}
    for d in dead:
        original = by_offset[(d.source.partition, d.source.offset)]
        assert base64.b64decode(d.original) == original.value and d.source.topic == kit.EVENTS
    preds = [Prediction.model_validate(p) for p in kit.outputs(sink, kit.PREDICTIONS)]
    assert len(preds) == len(recs) - len(bad)
    assert engine.metrics.dead_letters() == {"invalid_json": 1, "schema": 2, "oversized": 1}
    assert source.committed == {tp: max(r.offset for r in records if r.tp == tp) + 1 for tp in {r.tp for r in records}}


def test_response_outside_the_models_categories_is_rejected(kit):
    recs = [{**GOOD, "response": 3}]
    items, concepts = kit.build_vocabularies(recs)
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                             kit.as_records(recs))
    kit.drain(engine, source)
    (dead,) = kit.outputs(sink, kit.DEAD)
    assert dead["reason"] == "schema" and "outside 0...1" in dead["detail"]
    assert not kit.outputs(sink, kit.PREDICTIONS)


def test_a_huge_record_is_dead_lettered_within_a_kafka_message():
    from ktstream.engine.messages import MAX_ORIGINAL_BYTES, dead_letter

    huge = Record("ev", 0, 9, b"u1", b"x" * (2 * MAX_ORIGINAL_BYTES))
    out = dead_letter("dead", huge, "oversized", "too big")
    letter = DeadLetter.model_validate_json(out.value)
    assert len(out.value) < 1_000_000 and base64.b64decode(letter.original) == huge.value[:MAX_ORIGINAL_BYTES]
    assert "truncated" in letter.detail and letter.source.offset == 9


def test_described_columns_become_each_events_fields():
    """``describe_rows``: one-number entries and small vectors go to each row's extras, maps over 64
    numbers stay out, ability is per learner, mastery only for the event's own concepts."""
    import torch

    from ktstream.engine.messages import describe_rows

    extras = {"ability": torch.tensor([0.5, -1.0]), "entropy": torch.tensor([[1.0], [2.0]]),
              "gates": torch.tensor([[0.0, 1.0], [1.0, 0.0]]), "attention": torch.ones(2, 65),
              "mastery": torch.tensor([[0.0, 0.0, 0.1, 0.2], [0.0, 0.0, 0.3, 0.4]])}
    rows = describe_rows(extras, [{"c2": 2, "unknown": 1}, {"c3": 3, "c2": 2}])
    assert rows == [{"extras": {"entropy": 1.0, "gates": [0.0, 1.0]}, "ability": 0.5,
                     "mastery": {"c2": pytest.approx(0.1)}},
                    {"extras": {"entropy": 2.0, "gates": [1.0, 0.0]}, "ability": -1.0,
                     "mastery": {"c3": pytest.approx(0.4), "c2": pytest.approx(0.3)}}]
    assert describe_rows({"entropy": torch.tensor([1.0])}) == [{"extras": {"entropy": 1.0}}]
    assert describe_rows({}, [{}, {}]) == [{"extras": {}}, {"extras": {}}] and describe_rows({}) == []
    with pytest.raises(ValueError, match="mastery needs"):
        describe_rows({"mastery": torch.zeros(1, 3)})


@pytest.mark.parametrize("max_batch", [1, 7, 500])
def test_an_event_delivered_again_at_a_new_offset_changes_nothing(kit, max_batch):
    """The dedup rule: an event with its learner's last applied event id, at a new offset, is dead-lettered
    (``duplicate``); the learner's later predictions are those of the stream without the repeat, however
    the stream is cut into micro-batches."""
    recs = kit.stream(n_learners=5, mean_length=12, seed=4)
    items, concepts = kit.build_vocabularies(recs)
    repeated = [r for i, r in enumerate(recs) for r in ([r, r] if i % 4 == 1 else [r])]

    def run(stream):
        engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                                 kit.as_records(stream), max_batch=max_batch)
        kit.drain(engine, source)
        return kit.outputs(sink, kit.PREDICTIONS), kit.outputs(sink, kit.DEAD)

    (clean, _), (preds, dead) = run(recs), run(repeated)
    by_event = {p["event_id"]: p["probs"] for p in preds}
    assert len(preds) == len(by_event) == len(clean)
    for p in clean:  # batch mates differ between the two runs: equal within fp32 (invariant 1)
        assert by_event[p["event_id"]] == pytest.approx(p["probs"], abs=1e-6), p["event_id"]
    assert len(dead) == len(repeated) - len(recs) and {d["reason"] for d in dead} == {"duplicate"}


@pytest.mark.parametrize("late_policy", ["dead-letter", "apply"])
@pytest.mark.parametrize("max_batch", [1, 500])
def test_an_event_delivered_again_after_later_events_changes_nothing(kit, late_policy, max_batch):
    """The dedup rule reaches back over the learner's raw window: a producer's retry that lands after the
    learner's next events (an old event id, an old or no event time) is a ``duplicate``, not a late event
    to apply again, and not a new one."""
    recs = kit.stream(n_learners=4, mean_length=10, seed=7)
    items, concepts = kit.build_vocabularies(recs)
    again = [dict(r) for r in recs[::3]]
    for r in again[::2]:
        r.pop("event_time", None)  # an untimed repeat cannot be told by its time
    items, concepts = kit.build_vocabularies(recs)

    def run(stream):
        engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                                 kit.as_records(stream), max_batch=max_batch,
                                                 late_policy=late_policy)
        kit.drain(engine, source)
        states = {lid: engine.cache.get(lid) for lid in list(engine.cache.keys())}
        return kit.outputs(sink, kit.PREDICTIONS), kit.outputs(sink, kit.DEAD), states

    (clean, _, want), (preds, dead, got) = run(recs), run(recs + again)
    assert len(preds) == len(clean) and len(dead) == len(again), (len(preds), len(dead))
    assert {d["reason"] for d in dead} == {"duplicate"}
    for lid, st in want.items():
        assert got[lid].events == st.events
        for k, v in st.state.items():
            assert torch.allclose(got[lid].state[k], v, atol=1e-6), (lid, k)
