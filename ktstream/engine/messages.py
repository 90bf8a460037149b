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

import torch

from ktstream.engine.decode import Decoded, Rejected
from ktstream.engine.records import Output, Record
from ktstream.schema import DeadLetter, Prediction, SourceRef

MAX_EXTRA_VALUES = 64


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def source_ref(record: Record) -> SourceRef:
    # Built from a broker record (already typed): no validation needed on this hot path.
    return SourceRef.model_construct(topic=record.topic, partition=record.partition, offset=record.offset)


def dead_letter(topic: str, record: Record, reason: str, detail: str) -> Output:
    """The original bytes (base64), the reason category, a detail, and where it came from."""
    msg = DeadLetter(reason=reason, detail=detail[:2000], original=base64.b64encode(record.value or b"").decode(),
                     source=source_ref(record), failed_at_ms=now_ms())
    return Output(topic, record.key, msg.model_dump_json().encode())


def rejected(topic: str, r: Rejected) -> Output:
    return dead_letter(topic, r.record, r.reason, r.detail)


def describe_row(extras: dict[str, torch.Tensor], b: int, concepts: dict[str, int]) -> dict:
    """Row ``b`` of ``model.describe`` output -> Prediction fields (ability, mastery, extras).

    ``ability`` / ``theta`` (one number per learner) becomes ``ability``; ``mastery``
    (B, n_concepts), columns indexed by the concept vocabulary, is reported for the
    event's own concepts (``concepts``: concept id -> vocabulary index); any other
    entry with at most 64 numbers per learner goes to ``extras``.
    """
    out: dict = {"extras": {}}
    for key, value in extras.items():
        row = value[b].detach().float().reshape(-1)
        if key in ("ability", "theta") and row.numel() == 1:
            out["ability"] = float(row[0])
        elif key == "mastery":
            out["mastery"] = {c: float(row[i]) for c, i in concepts.items() if 1 < i < row.numel()}
        elif row.numel() <= MAX_EXTRA_VALUES:
            out["extras"][key] = float(row[0]) if row.numel() == 1 else row.tolist()
    return out


def prediction(topic: str, d: Decoded, model_name: str, version: str, probs: list[float], late: bool,
               received_ms: int, extras: dict | None = None) -> tuple[Output, int]:
    """The prediction message for one event, and its produced-at time (epoch ms)."""
    e = d.event
    k = len(probs)
    produced = now_ms()
    # model_construct skips validation (every field is ours and typed; the tests validate the JSON).
    msg = Prediction.model_construct(source=source_ref(d.record), event_id=e.event_id, learner_id=e.learner_id,
                     item_id=e.item_id, model_name=model_name, model_version=version, probs=probs,
                     p_correct=probs[1] if k == 2 else None,
                     expected_score=sum(i * p for i, p in enumerate(probs)) if k > 2 else None,
                     event_time=d.event_time_ms, late=late, received_at_ms=received_ms,
                     produced_at_ms=produced, **(extras or {"extras": {}}))
    return Output(topic, e.learner_id.encode(), msg.model_dump_json(exclude_none=True).encode()), produced
