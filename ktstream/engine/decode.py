"""Record bytes -> validated event, or the reason it must be dead-lettered (invariant 6).

Checks run cheapest first: size, then the pydantic schema straight from the
bytes (`Event.model_validate_json`: parsed and validated in pydantic's Rust core,
no intermediate dict; `ktstream.schema.Event`: unknown fields, wrong types,
out-of-range values, ids over their byte limits, attributes nested too deep),
then the record key, then the event time against the clock. A record pydantic
refuses is parsed again by orjson, so that invalid JSON and a schema error keep
their own categories; an event with ``attributes`` is also parsed by orjson,
which refuses the NaN and Infinity that pydantic's parser lets into them. Every
failure keeps the original bytes and names its category in ``reason``:

- ``oversized``: more bytes than the limit; ``invalid_json``: not UTF-8 JSON
  (orjson: strict RFC 8259, nesting at most 1024 deep, never a RecursionError),
  or not an object, or a tombstone; ``schema``: the event schema refused it;
- ``missing_key``: a record without a key. Kafka spreads keyless records over
  partitions, so one learner's events would land in several partitions (two
  partition stores, duplicates undetectable): rejected, never re-keyed;
- ``key_mismatch``: keyed by anything but its learner id (invariant 3);
- ``future``: event time later than ``not_after_ms`` (the caller's clock plus
  the allowed clock skew). Applied, it would make every later event of the
  learner late.
"""

from __future__ import annotations

from typing import NamedTuple

import orjson
import pydantic

from ktstream.core import Record
from ktstream.schema import Event

#: Dead-letter reason categories produced here (``late`` and ``duplicate`` come from the batcher).
REASONS = ("oversized", "invalid_json", "schema", "missing_key", "key_mismatch", "future")


class Rejected(NamedTuple):
    """A record that failed validation: category and a message a person can act on."""

    record: Record
    reason: str
    detail: str


class Decoded(NamedTuple):
    """A valid event with the record it came from (a named tuple: one is made per event)."""

    record: Record
    event: Event
    event_time_ms: int | None


def decode(record: Record, max_bytes: int, not_after_ms: int | None = None) -> Decoded | Rejected:
    """Validate one record; with ``not_after_ms``, events timed after it are rejected as ``future``.

    >>> ok = decode(Record("ev", 0, 7, b"u1", b'{"event_id":"e","learner_id":"u1","item_id":"q"}'), 1024)
    >>> ok.event.learner_id, ok.event_time_ms
    ('u1', None)
    >>> decode(Record("ev", 0, 8, b"u1", b'{"event_id": '), 1024).reason
    'invalid_json'
    >>> decode(Record("ev", 0, 9, b"u1", b'{"event_id":"e","learner_id":"u1","item_id":"q","x":1}'), 1024).reason
    'schema'
    >>> decode(Record("ev", 0, 10, None, b'{"event_id":"e","learner_id":"u1","item_id":"q"}'), 1024).reason
    'missing_key'
    >>> decode(Record("ev", 0, 11, b"u1", b'{"event_id":"e","learner_id":"u1","item_id":"q","event_time":9}'),
    ...        1024, not_after_ms=8).reason
    'future'
    """
    value = record.value
    if value is None:
        return Rejected(record, "invalid_json", "record has no value (tombstone)")
    if len(value) > max_bytes:
        return Rejected(record, "oversized", f"record is {len(value)} bytes; the limit is {max_bytes}")
    try:
        event = Event.model_validate_json(value)  # parsed and validated from the bytes in pydantic's core
    except pydantic.ValidationError:
        event = _strict(record, value)  # the reason, as the strict parser and the schema name it
        if isinstance(event, Rejected):
            return event
    if event.attributes and (objection := _not_strict_json(value)) is not None:
        return Rejected(record, "invalid_json", f"not UTF-8 JSON: {objection}")
    if record.key is None:
        return Rejected(record, "missing_key", f"record has no key; key it by its learner id "
                        f"{event.learner_id!r} so the learner's events stay on one partition")
    if record.key != event.learner_id.encode():
        return Rejected(record, "key_mismatch",
                        f"record key {record.key[:64]!r} is not the learner id {event.learner_id!r}")
    time_ms = event.event_time  # epoch milliseconds
    if not_after_ms is not None and time_ms is not None and time_ms > not_after_ms:
        return Rejected(record, "future", f"event time {time_ms} is {time_ms - not_after_ms} ms past the clock "
                        f"plus the allowed skew ({not_after_ms})")
    return tuple.__new__(Decoded, (record, event, time_ms))  # Decoded's own constructor is a Python call


def _strict(record: Record, value: bytes) -> Event | Rejected:
    """After ``Event.model_validate_json`` refused ``value``: orjson first (invalid_json: strict RFC 8259,
    nesting up to 1024 deep), then the schema on the parsed object, whose errors name the reason. An event
    both accept (a JSON text pydantic's parser alone refuses) is valid."""
    try:
        data = orjson.loads(value)  # strict RFC 8259 (no NaN, no lone surrogates)
    except orjson.JSONDecodeError as exc:
        return Rejected(record, "invalid_json", f"not UTF-8 JSON: {exc}")
    if not isinstance(data, dict):
        return Rejected(record, "invalid_json", f"expected a JSON object, got {type(data).__name__}")
    try:
        return Event.model_validate(data)
    except pydantic.ValidationError as exc:
        return Rejected(record, "schema", _summarise(exc))


def _not_strict_json(value: bytes) -> str | None:
    """orjson's objection to ``value``, if any. pydantic's parser accepts NaN, Infinity and numbers beyond a
    double; the validators refuse them everywhere but in the free-form ``attributes``, so an event that has
    attributes is also parsed strictly (events without them pay nothing)."""
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return str(exc)
    return None


def _summarise(exc: pydantic.ValidationError) -> str:
    """One line per problem: 'field: message' (pydantic's own wording)."""
    parts = []
    for err in exc.errors(include_url=False)[:10]:
        loc = ".".join(str(x) for x in err["loc"]) or "<event>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
