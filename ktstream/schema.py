"""Wire schemas: interaction events in, predictions and dead letters out.

Events are validated strictly at the edge: unknown fields, wrong types and
out-of-range values are rejected with a message a person can act on, and the
caller dead-letters the original bytes (invariant 6). The bounds below hold
for every consumer of events (engine, archiver, trainer, converters): an
event that validates fits the archive's Parquet columns and every datetime
computation, so no later stage can fail on it.

>>> e = Event.model_validate({"event_id": "e1", "learner_id": "u1", "item_id": "q7",
...                           "concept_ids": ["fractions"], "response": 1,
...                           "event_time": 1700000000000})
>>> e.event_time_ms
1700000000000
>>> e.has_response
True
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Most UTF-8 bytes of each id (event, learner, item, step, and each concept id).
MAX_ID_BYTES = 256
#: Most concept ids on one event.
MAX_CONCEPTS = 64
#: Largest ``seq`` and ``elapsed_ms``: the archive stores them as int64.
MAX_INT64 = 2**63 - 1
#: Deepest nesting of ``attributes`` (the object itself is depth 1).
MAX_ATTRIBUTES_DEPTH = 8
#: Most bytes of ``attributes`` written as compact JSON.
MAX_ATTRIBUTES_BYTES = 16_384
#: Most numbers per learner a model's ``describe`` entry may have to go into a prediction's ``extras``
#: (larger ones, such as full attention maps, stay out of the message).
MAX_EXTRA_VALUES = 64

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The event-time range, in epoch milliseconds (UTC years 1..9999, the range of a datetime).
MIN_EVENT_TIME_MS = (datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) // timedelta(milliseconds=1)
MAX_EVENT_TIME_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc) - _EPOCH) // timedelta(
    milliseconds=1)


_MS = timedelta(milliseconds=1)


def _epoch_ms(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError("event_time must carry a time zone (RFC 3339, e.g. 2024-05-01T10:00:00Z)")
    if value.microsecond % 1000 == 0:  # whole milliseconds (every epoch-ms time): exact integer arithmetic
        return (value - _EPOCH) // _MS
    return int(round(value.timestamp() * 1000))


def _aware_epoch_ms(v: datetime) -> int:
    """Epoch milliseconds of ``v`` if it carries a time zone and stays within UTC years 1..9999 once its
    offset is applied, else a ValueError."""
    ms = _epoch_ms(v)
    if v.tzinfo is not timezone.utc:  # a UTC datetime is within 1..9999 already
        try:
            v.astimezone(timezone.utc)
        except (OverflowError, ValueError):
            raise ValueError(f"event_time {v.isoformat()} falls outside UTC years 1..9999 once its offset "
                             f"is applied") from None
    return ms


def _within_depth(value: Any, limit: int) -> bool:
    """Whether JSON-like ``value`` nests at most ``limit`` containers deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def check_id(value: str, what: str, min_bytes: int = 1) -> str:
    """``value`` if it is ``min_bytes``..MAX_ID_BYTES bytes of UTF-8, else a ValueError naming ``what``.

    >>> check_id("é" * 128, "item_id")[:2]
    'éé'
    >>> check_id("é" * 129, "item_id")
    Traceback (most recent call last):
    ValueError: item_id must be 1..256 bytes of UTF-8, got 258
    """
    if value.isascii():  # a flag on the string: one byte per character, nothing to encode
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise ValueError(f"{what} is not valid Unicode text: {exc.reason}") from None
    if not min_bytes <= size <= MAX_ID_BYTES:
        raise ValueError(f"{what} must be {min_bytes}..{MAX_ID_BYTES} bytes of UTF-8, got {size}")
    return value


class Event(BaseModel):
    """One learner interaction (or a prediction request when `response` is absent).

    `event_time` is when the learner acted: RFC 3339 text or epoch milliseconds,
    held as epoch milliseconds (the form every consumer reads). Sources without
    a clock leave it out and give `seq`, the source's own order within the
    learner. Interactions of one learner with the same `step_id` (or, without
    step ids, the same event time) form one step: all are predicted before any
    of their responses is applied.
    """

    # No string cache in the JSON parser: event ids are unique, so caching them costs a tenth of the parse
    # time and keeps up to 16,384 strings of earlier events alive, for no hits
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, cache_strings=False)

    event_id: str = Field(min_length=1, max_length=MAX_ID_BYTES, description="at most 256 bytes of UTF-8")
    learner_id: str = Field(min_length=1, max_length=MAX_ID_BYTES, description="at most 256 bytes of UTF-8")
    item_id: str = Field(min_length=1, max_length=MAX_ID_BYTES, description="at most 256 bytes of UTF-8")
    concept_ids: list[str] = Field(default_factory=list, max_length=MAX_CONCEPTS,
                                   description="each 1..256 bytes of UTF-8")
    response: int | None = Field(default=None, ge=0, le=255,
                                 description="ordered category 0..K-1; absent = prediction request")
    event_time: int | None = Field(default=None, description="RFC 3339 or epoch milliseconds, within UTC years "
                                                             "1..9999; held as epoch milliseconds",
                                   json_schema_extra={"anyOf": [  # what _parse_time accepts, both forms
                                       {"type": "string", "format": "date-time"},
                                       {"type": "number", "minimum": MIN_EVENT_TIME_MS, "maximum": MAX_EVENT_TIME_MS},
                                       {"type": "null"}]})
    seq: int | None = Field(default=None, ge=0, le=MAX_INT64, description="source order within the learner")
    step_id: str | None = Field(default=None, max_length=MAX_ID_BYTES)
    elapsed_ms: int | None = Field(default=None, ge=0, le=MAX_INT64)
    attributes: dict[str, Any] = Field(default_factory=dict, description="free-form JSON object, at most 8 deep "
                                                                         "and 16384 bytes")

    @field_validator("response", "seq", "elapsed_ms", mode="before")
    @classmethod
    def _no_bool_or_float(cls, v: Any) -> Any:
        if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
            raise ValueError("must be a whole number, not %r" % (v,))
        return v

    @field_validator("event_time", mode="before")
    @classmethod
    def _parse_time(cls, v: Any) -> Any:
        """Either form to epoch milliseconds, the form every consumer reads (whole ones stay exact)."""
        if v is None:
            return v
        if isinstance(v, bool):
            raise ValueError("event_time must be RFC 3339 text or epoch milliseconds")
        if isinstance(v, (int, float)):
            if not MIN_EVENT_TIME_MS <= v <= MAX_EVENT_TIME_MS:  # NaN fails too
                raise ValueError(f"event_time in epoch milliseconds must be in {MIN_EVENT_TIME_MS}.."
                                 f"{MAX_EVENT_TIME_MS} (UTC years 1..9999), got {v!r}")
            if isinstance(v, int):
                return v
            return _epoch_ms(_EPOCH + timedelta(milliseconds=v))  # rounded as an RFC 3339 time with microseconds
        if isinstance(v, datetime):
            return _aware_epoch_ms(v)
        if isinstance(v, str):
            try:
                parsed = datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError as exc:
                raise ValueError("event_time %r is not RFC 3339 (e.g. 2024-05-01T10:00:00Z)" % v[:64]) from exc
            return _aware_epoch_ms(parsed)
        raise ValueError("event_time must be RFC 3339 text or epoch milliseconds")

    @model_validator(mode="after")
    def _ids_within_bytes(self) -> Event:
        """pydantic bounds every id to 1..256 characters; only non-ASCII text can exceed 256 bytes. One
        validator for all ids: each Python validator call costs the event's validation time."""
        if not (self.event_id.isascii() and self.learner_id.isascii() and self.item_id.isascii()):
            check_id(self.event_id, "event_id")
            check_id(self.learner_id, "learner_id")
            check_id(self.item_id, "item_id")
        if self.step_id is not None:
            check_id(self.step_id, "step_id", min_bytes=0)
        for c in self.concept_ids:
            if not (c.isascii() and 0 < len(c) <= MAX_ID_BYTES):  # ASCII: one byte per character
                check_id(c, "each concept id")
        return self

    @field_validator("attributes", mode="before")
    @classmethod
    def _bounded_attributes(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v  # pydantic names the type error
        if not _within_depth(v, MAX_ATTRIBUTES_DEPTH):
            raise ValueError(f"attributes nest deeper than {MAX_ATTRIBUTES_DEPTH} levels")
        try:
            size = len(orjson.dumps(v))
        except orjson.JSONEncodeError as exc:
            raise ValueError(f"attributes are not JSON: {exc}") from None
        if size > MAX_ATTRIBUTES_BYTES:
            raise ValueError(f"attributes are {size} bytes of JSON; the limit is {MAX_ATTRIBUTES_BYTES}")
        return v

    @property
    def event_time_ms(self) -> int | None:
        return self.event_time

    @property
    def has_response(self) -> bool:
        return self.response is not None

    def to_record(self) -> dict[str, Any]:
        """Plain dict for JSONL / Parquet, event time as epoch milliseconds."""
        d = self.model_dump(exclude_none=True)
        if not d.get("attributes"):
            d.pop("attributes", None)
        return d


class SourceRef(BaseModel):
    """Where a record came from, so consumers and restores can drop duplicates."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)


class Prediction(BaseModel):
    """The prequential prediction for one event, emitted before its response is used."""

    model_config = ConfigDict(extra="forbid")

    source: SourceRef | None = None
    event_id: str
    learner_id: str
    item_id: str
    model_name: str
    model_version: str
    probs: list[float] = Field(description="probability of each response category 0..K-1")
    p_correct: float | None = Field(default=None, description="binary models: P(response = 1)")
    expected_score: float | None = None
    ability: float | None = Field(default=None, description="IRT theta where the model has one")
    mastery: dict[str, float] | None = Field(default=None, description="per-concept mastery where provided")
    extras: dict[str, Any] = Field(default_factory=dict)
    event_time: int | None = Field(default=None, description="epoch milliseconds")
    late: bool = False
    received_at_ms: int
    produced_at_ms: int


class DeadLetter(BaseModel):
    """Input that failed: the original bytes, why, and where it came from."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(description="short machine-readable category, e.g. invalid_json, schema, late")
    detail: str
    original: str = Field(description="the original bytes, base64")
    source: SourceRef | None = None
    failed_at_ms: int


#: JSON Schema dialect of the published schemas (docs/schemas/), and the prefix of their ``$id``.
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID_PREFIX = "urn:ktstream:schema:"


def json_schemas() -> dict[str, Any]:
    """JSON Schemas of every wire message, keyed by name, each with its ``$schema`` dialect and ``$id``.

    >>> sorted(json_schemas()["Event"])[:2]
    ['$id', '$schema']
    """
    return {m.__name__: {"$schema": SCHEMA_DIALECT, "$id": f"{SCHEMA_ID_PREFIX}{m.__name__}", **m.model_json_schema()}
            for m in (Event, Prediction, DeadLetter)}


def json_schemas_text() -> str:
    return json.dumps(json_schemas(), indent=2, sort_keys=True)
