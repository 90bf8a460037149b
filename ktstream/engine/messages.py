"""Wire messages the engine produces: predictions and dead letters (ktstream.schema).

A prediction carries its source (topic, partition, offset) so that consumers
and restores can drop duplicates (invariant 4), the model name and version,
the probability of every response category, ``p_correct`` for binary models,
the expected score for ordinal ones, and what the model's ``describe`` adds
(ability, per-concept mastery, other per-learner numbers in ``extras``).
"""

from __future__ import annotations

import base64
import time

import orjson
import torch

from ktstream.core import Output, Record
from ktstream.engine.decode import Decoded
from ktstream.schema import MAX_EXTRA_VALUES, DeadLetter, SourceRef

#: Dead letters keep at most this many original bytes, so that a huge record's dead letter
#: (base64: 4/3 of the size) still fits a default 1 MB Kafka message; the source reference
#: points at the full record.
MAX_ORIGINAL_BYTES = 512 * 1024


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def source_ref(record: Record) -> SourceRef:
    return SourceRef(topic=record.topic, partition=record.partition, offset=record.offset)


def dead_letter(topic: str, record: Record, reason: str, detail: str) -> Output:
    """The original bytes (base64), the reason category, a detail, and where it came from."""
    original = record.value or b""
    if len(original) > MAX_ORIGINAL_BYTES:
        detail = (f"{detail[:1500]} [original truncated to its first {MAX_ORIGINAL_BYTES} of {len(original)} bytes; "
                  f"the full record is at its source offset]")
        original = original[:MAX_ORIGINAL_BYTES]
    msg = DeadLetter(reason=reason, detail=detail[:2000], original=base64.b64encode(original).decode(),
                     source=source_ref(record), failed_at_ms=now_ms())
    return Output(topic, record.key, msg.model_dump_json().encode())


def describe_rows(extras: dict[str, torch.Tensor], concepts: list[dict[str, int]] | None = None) -> list[dict]:
    """``model.describe`` output for a wave -> per-event Prediction fields (ability, mastery, extras).

    ``ability`` / ``theta`` (one number per learner) becomes ``ability``; ``mastery``
    (B, n_concepts), columns indexed by the concept vocabulary, is reported for each
    event's own concepts (``concepts[b]``: concept id -> vocabulary index; needed only
    with ``mastery``); any other entry with at most 64 numbers per learner goes to
    ``extras`` (larger ones, such as full attention maps, stay out of the message).
    """
    B = len(concepts) if concepts is not None else len(next(iter(extras.values()), ()))
    ability, mastery, small = None, None, {}  # small: key -> B values
    for key, value in extras.items():
        v = value.detach().float().reshape(B, -1)  # (B, n)
        if key in ("ability", "theta") and v.shape[1] == 1:
            ability = v[:, 0].tolist()
        elif key == "mastery":
            if concepts is None:
                raise ValueError("describe_rows: mastery needs each event's concepts")
            mastery = []
            for b in range(B):
                cols = {c: i for c, i in concepts[b].items() if 1 < i < v.shape[1]}
                mastery.append(dict(zip(cols, v[b, list(cols.values())].tolist())) if cols else {})
        elif v.shape[1] <= MAX_EXTRA_VALUES:
            small[key] = v[:, 0].tolist() if v.shape[1] == 1 else v.tolist()
    keys = list(small)
    rows = [{"extras": dict(zip(keys, values))} for values in zip(*small.values())] if keys \
        else [{"extras": {}} for _ in range(B)]
    for name, column in (("ability", ability), ("mastery", mastery)):
        if column is not None:
            for row, x in zip(rows, column):
                row[name] = x
    return rows


def describe_row(extras: dict[str, torch.Tensor], b: int, concepts: dict[str, int]) -> dict:
    """Row ``b`` of ``describe`` output as Prediction fields (one event; see ``describe_rows``)."""
    return describe_rows({k: v[b : b + 1] for k, v in extras.items()}, [concepts])[0]


def prediction(topic: str, d: Decoded, model_name: str, version: str, probs: list[float], late: bool,
               received_ms: int, fields: dict | None = None) -> tuple[Output, int]:
    """The prediction message (ktstream.schema.Prediction as JSON) for one event, and its produced-at time.

    Built as a plain dict in Prediction's field order (None fields left out) because this
    runs once per event; the tests validate the JSON against the Prediction model.
    """
    e, rec = d.event, d.record
    k = len(probs)
    produced = now_ms()
    msg = {"source": {"topic": rec.topic, "partition": rec.partition, "offset": rec.offset},
           "event_id": e.event_id, "learner_id": e.learner_id, "item_id": e.item_id, "model_name": model_name,
           "model_version": version, "probs": probs}
    if k == 2:
        msg["p_correct"] = probs[1]
    else:
        msg["expected_score"] = sum(i * p for i, p in enumerate(probs))
    if fields:
        msg.update({key: fields[key] for key in ("ability", "mastery") if key in fields})
        msg["extras"] = fields.get("extras", {})
    if d.event_time_ms is not None:
        msg["event_time"] = d.event_time_ms
    msg.update(late=late, received_at_ms=received_ms, produced_at_ms=produced)
    # tuple.__new__: Output's own constructor is a Python call, once per event
    return tuple.__new__(Output, (topic, e.learner_id.encode(), orjson.dumps(msg), None, ())), produced
