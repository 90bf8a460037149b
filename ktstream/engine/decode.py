"""Record bytes -> validated event, or the reason it must be dead-lettered (invariant 6).

Checks run cheapest first: size, UTF-8 + JSON, a JSON object, the pydantic
schema (`ktstream.schema.Event`: unknown fields, wrong types, out-of-range
values), then the record key (a producer that keys an event by anything but
its learner id breaks per-learner order, invariant 3). Every failure keeps the
original bytes and names its category in ``reason``.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pydantic

from ktstream.engine.records import Record
from ktstream.schema import Event

#: Dead-letter reason categories produced here (``late`` comes from the batcher).
REASONS = ("oversized", "invalid_json", "schema", "key_mismatch")


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record that failed validation: category and a message a person can act on."""

    record: Record
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Decoded:
    """A valid event with the record it came from."""

    record: Record
    event: Event
    event_time_ms: int | None


def decode(record: Record, max_bytes: int) -> Decoded | Rejected:
    """Validate one record.

    >>> ok = decode(Record("ev", 0, 7, b"u1", b'{"event_id":"e","learner_id":"u1","item_id":"q"}'), 1024)
    >>> ok.event.learner_id, ok.event_time_ms
    ('u1', None)
    >>> decode(Record("ev", 0, 8, b"u1", b'{"event_id": '), 1024).reason
    'invalid_json'
    >>> decode(Record("ev", 0, 9, b"u1", b'{"event_id":"e","learner_id":"u1","item_id":"q","x":1}'), 1024).reason
    'schema'
    """
    value = record.value
    if value is None:
        return Rejected(record, "invalid_json", "record has no value (tombstone)")
    if len(value) > max_bytes:
        return Rejected(record, "oversized", f"record is {len(value)} bytes; the limit is {max_bytes}")
    try:
        data = orjson.loads(value)  # strict RFC 8259 (no NaN, no lone surrogates), twice json's speed
    except orjson.JSONDecodeError as exc:
        return Rejected(record, "invalid_json", f"not UTF-8 JSON: {exc}")
    if not isinstance(data, dict):
        return Rejected(record, "invalid_json", f"expected a JSON object, got {type(data).__name__}")
    try:
        event = Event.model_validate(data)
    except pydantic.ValidationError as exc:
        return Rejected(record, "schema", _summarise(exc))
    if record.key is not None and record.key != event.learner_id.encode():
        return Rejected(record, "key_mismatch",
                        f"record key {record.key[:64]!r} is not the learner id {event.learner_id!r}")
    return Decoded(record, event, event.event_time_ms)


def _summarise(exc: pydantic.ValidationError) -> str:
    """One line per problem: 'field: message' (pydantic's own wording)."""
    parts = []
    for err in exc.errors(include_url=False)[:10]:
        loc = ".".join(str(x) for x in err["loc"]) or "<event>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
