"""Wire schemas: interaction events in, predictions and dead letters out.

Events are validated strictly at the edge: unknown fields, wrong types and
out-of-range values are rejected with a message a person can act on, and the
caller dead-letters the original bytes (invariant 6).

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
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_ID_LENGTH = 256
MAX_CONCEPTS = 64


def _epoch_ms(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError("event_time must carry a time zone (RFC 3339, e.g. 2024-05-01T10:00:00Z)")
    return int(round(value.timestamp() * 1000))


class Event(BaseModel):
    """One learner interaction (or a prediction request when `response` is absent).

    `event_time` is when the learner acted: RFC 3339 text or epoch milliseconds.
    Sources without a clock leave it out and give `seq`, the source's own order
    within the learner. Interactions of one learner with the same `step_id`
    (or, without step ids, the same event time) form one step: all are predicted
    before any of their responses is applied.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    event_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    learner_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    item_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    concept_ids: list[str] = Field(default_factory=list, max_length=MAX_CONCEPTS)
    response: int | None = Field(default=None, ge=0, le=255,
                                 description="ordered category 0..K-1; absent = prediction request")
    event_time: datetime | None = Field(default=None, description="RFC 3339 or epoch milliseconds")
    seq: int | None = Field(default=None, ge=0, description="source order within the learner")
    step_id: str | None = Field(default=None, max_length=MAX_ID_LENGTH)
    elapsed_ms: int | None = Field(default=None, ge=0)
    attributes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("response", "seq", "elapsed_ms", mode="before")
    @classmethod
    def _no_bool_or_float(cls, v: Any) -> Any:
        if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
            raise ValueError("must be a whole number, not %r" % (v,))
        return v

    @field_validator("event_time", mode="before")
    @classmethod
    def _parse_time(cls, v: Any) -> Any:
        if v is None or isinstance(v, datetime):
            return v
        if isinstance(v, bool):
            raise ValueError("event_time must be RFC 3339 text or epoch milliseconds")
        if isinstance(v, (int, float)):
            if not 0 <= v < 10**14:
                raise ValueError("event_time in epoch milliseconds is out of range: %r" % (v,))
            return datetime.fromtimestamp(v / 1000.0, tz=timezone.utc)
        if isinstance(v, str):
            try:
                parsed = datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError as exc:
                raise ValueError("event_time %r is not RFC 3339 (e.g. 2024-05-01T10:00:00Z)" % v) from exc
            return parsed
        raise ValueError("event_time must be RFC 3339 text or epoch milliseconds")

    @field_validator("event_time")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None:
            _epoch_ms(v)
        return v

    @field_validator("concept_ids")
    @classmethod
    def _concepts(cls, v: list[str]) -> list[str]:
        for c in v:
            if not c or len(c) > MAX_ID_LENGTH:
                raise ValueError("each concept id must be 1..%d characters" % MAX_ID_LENGTH)
        return v

    @property
    def event_time_ms(self) -> int | None:
        return None if self.event_time is None else _epoch_ms(self.event_time)

    @property
    def has_response(self) -> bool:
        return self.response is not None

    def to_record(self) -> dict[str, Any]:
        """Plain dict for JSONL / Parquet, event time as epoch milliseconds."""
        d = self.model_dump(exclude_none=True)
        if self.event_time is not None:
            d["event_time"] = self.event_time_ms
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


def json_schemas() -> dict[str, Any]:
    """JSON Schemas of every wire message, keyed by name."""
    return {m.__name__: m.model_json_schema() for m in (Event, Prediction, DeadLetter)}


def json_schemas_text() -> str:
    return json.dumps(json_schemas(), indent=2, sort_keys=True)
