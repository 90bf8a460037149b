"""The published JSON Schemas (docs/schemas/*.json) accept what ktstream accepts and produces.

Every example message in the docs, events from every converter (the converters' hand-made
fixtures, and the first rows of each real data set we hold), simulated events, and the
predictions and dead letters a real engine run writes are validated against the committed
files with the jsonschema library, as a producer or consumer in another language would.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from connectors.datasets import DATASET_FORMATS, data_root, iter_events, split_files
from ktstream.data.simulate import simulate
from ktstream.schema import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, Event
from tests.connectors.datasets.test_converters import FIXTURES
from tests.engine import conftest as kit

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FormatChecker())


def valid(name: str, message: dict) -> None:
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator(name).iter_errors(message)]
    assert not errors, f"{name} rejects {message}: {errors}"


def test_every_schema_names_its_dialect_and_id():
    for path in sorted(SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", path.name
        assert schema["$id"] == f"urn:ktstream:schema:{path.stem}", path.name


def doc_examples() -> list[tuple[str, str, dict]]:
    """(doc, schema name, message) for every ```json block of the docs and README that is a wire message."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```json\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            try:
                message = json.loads(block)
            except json.JSONDecodeError:
                continue
            if isinstance(message, dict) and {"event_id", "learner_id", "item_id"} <= set(message):
                found.append((doc.name, "Prediction" if "probs" in message else "Event", message))
            elif isinstance(message, dict) and {"reason", "original"} <= set(message):
                found.append((doc.name, "DeadLetter", message))
    return found


def test_docs_show_examples_of_events_and_predictions():
    assert {name for _, name, _ in doc_examples()} >= {"Event", "Prediction"}


@pytest.mark.parametrize("doc,name,message", doc_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_example_message_in_the_docs_validates(doc, name, message):
    valid(name, message)
    if name == "Event":
        Event.model_validate(message)  # and the engine takes it too


@pytest.mark.parametrize("time", [1_700_000_000_000, 0, MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS,
                                  "2024-05-01T10:00:00Z", "2024-05-01T10:00:00.250+02:00", None])
def test_event_times_the_engine_accepts_validate(time):
    message = {"event_id": "e1", "learner_id": "u1", "item_id": "q1", "response": 1, "event_time": time}
    Event.model_validate(message)
    valid("Event", message)


@pytest.mark.parametrize("form", [1_700_000_000_250, 1_700_000_000_250.0, "2023-11-14T22:13:20.250Z",
                                  "2023-11-14T23:13:20.25+01:00",
                                  datetime(2023, 11, 14, 22, 13, 20, 250_000, timezone.utc),
                                  b'"2023-11-14T22:13:20.250Z"', b"1700000000250"])
def test_every_form_of_one_instant_holds_the_same_epoch_milliseconds(form):
    """The event holds its time as epoch milliseconds, whichever form (and path: a dict or JSON bytes) gave it."""
    fields = {"event_id": "e1", "learner_id": "u1", "item_id": "q1"}
    if isinstance(form, bytes):
        event = Event.model_validate_json(b'{"event_id":"e1","learner_id":"u1","item_id":"q1","event_time":%s}' % form)
    else:
        event = Event.model_validate({**fields, "event_time": form})
    assert event.event_time == event.event_time_ms == 1_700_000_000_250
    assert event.to_record()["event_time"] == 1_700_000_000_250


def test_sub_millisecond_times_round_to_the_nearest_millisecond():
    base = {"event_id": "e1", "learner_id": "u1", "item_id": "q1"}
    assert Event.model_validate({**base, "event_time": "1970-01-01T00:00:00.0016Z"}).event_time == 2
    assert Event.model_validate({**base, "event_time": 1.4}).event_time == 1
    with pytest.raises(ValueError, match="time zone"):
        Event.model_validate({**base, "event_time": "2024-05-01T10:00:00"})


def test_parsing_an_event_keeps_no_strings_of_earlier_events():
    """Event ids are unique: a parser cache of the strings it read would hold up to 16,384 of them (about
    1 MB, whichever came last) and cost a tenth of the parse time. Without it, equal texts parsed twice
    are two objects."""
    raw = b'{"event_id":"e-1","learner_id":"u1","item_id":"q1"}'
    first, second = Event.model_validate_json(raw), Event.model_validate_json(raw)
    assert first == second
    assert first.event_id is not second.event_id and first.learner_id is not second.learner_id


@pytest.mark.parametrize("time", [MAX_EVENT_TIME_MS + 1, MIN_EVENT_TIME_MS - 1, True, "yesterday", [1]])
def test_event_times_the_engine_rejects_are_rejected(time):
    message = {"event_id": "e1", "learner_id": "u1", "item_id": "q1", "event_time": time}
    with pytest.raises(ValueError):
        Event.model_validate(message)
    assert list(validator("Event").iter_errors(message)), f"the schema accepts event_time {time!r}"


@pytest.mark.parametrize("broken", [{"learner_id": None}, {"extra_field": 1}, {"response": -1}, {"item_id": ""},
                                    {"concept_ids": "c1"}])
def test_the_schema_rejects_malformed_events(broken):
    message = {"event_id": "e1", "learner_id": "u1", "item_id": "q1", "response": 1, **broken}
    if broken.get("learner_id", 1) is None:
        del message["learner_id"]
    assert list(validator("Event").iter_errors(message))


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
def test_converted_events_validate(tmp_path, fmt):
    records = list(iter_events(fmt, FIXTURES[fmt](tmp_path)))
    assert records
    for r in records:
        valid("Event", r)


def _real_sample(name: str, n: int = 300) -> list[dict]:
    folder = data_root() / name
    if not folder.is_dir():
        pytest.skip(f"data set {name} not found at {folder} (set KTSTREAM_DATA)")
    fmt = DATASET_FORMATS[name]
    splits = split_files(name)
    inputs = splits.train or (splits.folds[0].train if splits.folds else None)
    if inputs is None:
        inputs = {"assistments-raw": folder / "as.csv", "datashop": folder / "ct.csv"}.get(fmt, folder)
    return list(islice(iter_events(fmt, inputs), n))


@pytest.mark.parametrize("name", ["ednet_kt1_11users", "assist2009_skillbuilder_raw_2skills",
                                  "cognitive_tutor_algebra_subset", "dkvmn_assist2015", "assist2009_akt_pid"])
def test_a_sample_of_each_real_data_set_validates(name):
    records = _real_sample(name)
    assert records
    for r in records:
        valid("Event", r)


def test_simulated_events_validate():
    for r in simulate(n_learners=5, mean_length=20, seed=1, step_prob=0.3, query_prob=0.2):
        valid("Event", r)


def test_the_engine_output_validates():
    records = kit.stream(n_learners=6, mean_length=10)
    items, concepts = kit.build_vocabularies(records)
    raw = {3: b"{not json", 7: json.dumps({**records[7], "response": 9}).encode()}
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                             kit.as_records(records, raw=raw))
    kit.drain(engine, source)
    predictions, dead = kit.outputs(sink, kit.PREDICTIONS), kit.outputs(sink, kit.DEAD)
    assert predictions and len(dead) == 2
    for p in predictions:
        valid("Prediction", p)
    for d in dead:
        valid("DeadLetter", d)
