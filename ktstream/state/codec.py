"""A learner's state as bytes: tensors through safetensors, bookkeeping as plain columns.

Never pickle: a store file must be safe to open and readable by another
version of the code. Tensors (the model state and, when a step is open, the
state at the step's start) go into one safetensors blob, named ``s.<name>`` and
``p.<name>``; the learner's raw window (for rebuilding after a model swap)
rides in the blob's JSON metadata as ``window``, a list of
``[item_id, concept_ids, response, event_time_ms, step_id, seq]``; the
bookkeeping (step key, last applied event, counters, model
version) is returned as a dict of plain values for the store's columns.

``fp16=True`` halves the bytes of float32 tensors (compact stores for many
learners); it is lossy (about 1e-3 relative), so the default keeps float32 and
the exact-restore guarantees (invariant 4 at 1e-6) hold only without it.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ktstream.core import LearnerState, WindowRecord

_HALF = "h."  # name prefix of a float32 tensor stored as float16


def encode_tensors(state: dict[str, torch.Tensor], step_state: dict[str, torch.Tensor] | None,
                   fp16: bool = False, window: tuple[tuple, ...] = ()) -> bytes:
    named: dict[str, torch.Tensor] = {}
    for prefix, d in (("s.", state), ("p.", step_state or {})):
        for name, t in d.items():
            t = t.detach()
            if fp16 and t.dtype == torch.float32:
                named[_HALF + prefix + name] = t.to(torch.float16).contiguous()
            else:
                named[prefix + name] = t.contiguous().clone()  # safetensors refuses shared storage
    return st_save(named, metadata={"window": json.dumps(list(window), separators=(",", ":"))} if window else None)


def decode_window(blob: bytes) -> tuple[tuple, ...]:
    """The raw window from the blob's metadata (safetensors: 8-byte little-endian header size, JSON header),
    as plain tuples in ``WindowRecord``'s field order (ktstream.core); a record written before event ids
    were kept gets None."""
    (size,) = struct.unpack("<Q", blob[:8])
    meta = json.loads(blob[8:8 + size]).get("__metadata__") or {}
    rows = json.loads(meta["window"]) if "window" in meta else []
    return tuple(tuple(WindowRecord(item, tuple(concepts), *rest)) for item, concepts, *rest in rows)


def decode_tensors(blob: bytes) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    state: dict[str, torch.Tensor] = {}
    step: dict[str, torch.Tensor] = {}
    for name, t in st_load(blob).items():
        if name.startswith(_HALF):
            name, t = name[len(_HALF):], t.to(torch.float32)
        (state if name.startswith("s.") else step)[name[2:]] = t
    return state, (step or None)


def encode(st: LearnerState, fp16: bool = False) -> dict[str, Any]:
    """Column values for one learner (``blob`` holds the tensors)."""
    return {"learner_id": st.learner_id, "blob": encode_tensors(st.state, st.step_state, fp16, st.window),
            "model_version": st.model_version,
            "topic": None if st.partition is None else st.partition[0],
            "part": None if st.partition is None else st.partition[1],
            "step_key": None if st.step_key is None else json.dumps(list(st.step_key)),
            "last_event_time_ms": st.last_event_time_ms, "last_event_id": st.last_event_id,
            "last_offset": st.last_offset, "events": st.events, "responses": st.responses, "late": st.late}


def decode(row: dict[str, Any]) -> LearnerState:
    state, step = decode_tensors(row["blob"])
    key = None if row["step_key"] is None else tuple(json.loads(row["step_key"]))
    partition = None if row["topic"] is None else (row["topic"], int(row["part"]))
    return LearnerState(row["learner_id"], state, row["model_version"], partition, key, step,
                        row["last_event_time_ms"], row["last_event_id"], int(row["last_offset"]),
                        int(row["events"]), int(row["responses"]), int(row["late"]), decode_window(row["blob"]))


COLUMNS = ("learner_id", "blob", "model_version", "topic", "part", "step_key", "last_event_time_ms",
           "last_event_id", "last_offset", "events", "responses", "late")
