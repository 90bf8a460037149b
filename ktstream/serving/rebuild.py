"""Rebuild a learner's serving state with new weights, from its raw window of recent interactions.

After a hot swap the old state tensors mean nothing to the new model. The
engine keeps a bounded raw window of each learner's recent interactions
(canonical records); passing it through the new model's serving path gives
the state the new model would hold had it served that window. The engine
calls this lazily on a learner's next event and in a background pass.

The rebuild follows the engine's rules exactly: records in event-time order (ties:
``seq``), interactions of one step (same ``step_id``, else the same event time)
each update the state in turn, and the state at the start of the last step is
kept (``step_state``), so a later member of that step is still predicted from
it. Records without a response (prediction requests) change nothing.

A window shorter than the learner's history gives the state of a learner whose
history *is* that window: exact for windowed models whose receptive field fits
in it, an approximation for recurrent ones (docs/finetuning.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ktstream.core import step_key
from ktstream.data.histories import collate, encode_learner, group_by_learner
from ktstream.data.vocab import Vocabulary
from ktstream.models.base import KTModel, State, select_state, where_state
from ktstream.serving.stacking import split_state


@dataclass
class Rebuilt:
    """What the engine needs to resume a learner: the model state, and the open step."""

    learner_id: str
    state: State  # leading dim 1
    step_key: tuple[str, Any] | None  # key of the last step rebuilt
    step_state: State | None  # state at that step's start, when a member of it was applied
    applied: int  # interactions that updated the state
    last_event_time_ms: int | None


@torch.no_grad()  # not inference_mode: the states must stay usable outside it
def rebuild_states(model: KTModel, windows: dict[str, Sequence[dict[str, Any]]], items: Vocabulary,
                   concepts: Vocabulary, counter=None) -> dict[str, Rebuilt]:
    """Rebuild every learner of ``windows`` ({learner id: raw records}) in one batched serving pass.

    ``counter`` (optional, a prometheus Counter) is incremented by the number of learners rebuilt.
    """
    model.eval()
    ordered = group_by_learner(r for recs in windows.values() for r in recs)
    ids = [lid for lid in windows if ordered.get(lid)]
    out = {lid: Rebuilt(lid, split_state(model.init_state(1))[0], None, None, 0, None)
           for lid in windows if not ordered.get(lid)}
    if ids:
        hist = [encode_learner(lid, ordered[lid], items, concepts) for lid in ids]
        batch = collate(hist).to(next(model.parameters()).device)
        B, T = batch.shape
        state = model.init_state(B)
        start = state  # state at the start of each learner's current step
        for t in range(T):
            new_step = (batch.step_start[:, t] == t) & batch.mask[:, t]  # padding keeps the last step
            start = where_state(new_step, state, start)
            applies = batch.mask[:, t] & (batch.responses[:, t] >= 0)
            if bool(applies.any()):
                state = where_state(applies, model.update(state, batch.at(t)), state)
        for b, (lid, h) in enumerate(zip(ids, hist)):
            recs = ordered[lid]
            last = len(h) - 1
            first = int(h.step_start[last])
            key = step_key(recs[last].get("step_id"), recs[last].get("event_time"))
            applied = int((h.responses >= 0).sum())
            step_applied = bool((h.responses[first:] >= 0).any())
            times = [r["event_time"] for r in recs if r.get("event_time") is not None]
            row = torch.tensor([b], device=batch.items.device)
            out[lid] = Rebuilt(lid, select_state(state, row), key,
                               select_state(start, row) if key is not None and step_applied else None,
                               applied, max(times) if times else None)
    if counter is not None:
        counter.inc(len(windows))
    return out


def rebuild_state(model: KTModel, records: Sequence[dict[str, Any]], items: Vocabulary,
                  concepts: Vocabulary) -> Rebuilt:
    """One learner's state from its raw window (all records must share one learner id)."""
    lids = {r["learner_id"] for r in records}
    assert len(lids) <= 1, f"records of one learner expected, got {sorted(lids)[:3]}"
    lid = lids.pop() if lids else ""
    return rebuild_states(model, {lid: records}, items, concepts)[lid]

