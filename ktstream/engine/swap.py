"""Hot swap: serve new weights from the next micro-batch, rebuilding learner states from raw windows.

A state built by one model means nothing to another, so after a swap every
learner's state is rebuilt with the new weights by replaying its raw window
(the last ``engine.rebuild_window`` interactions it applied) through the new
model's serving path (ktstream.serving.rebuild). That happens lazily, for the
learners of a micro-batch whose state carries another model version, and in
a background pass over the hot cache between micro-batches. The bookkeeping
(last applied event, offsets, counters, the window itself) is kept as it was.

The open step survives the swap: the learner keeps its step key, and the state
at that step's start is taken from the replay when the window's last step is
that step and one of its members was applied (as the old state had it).

A window that holds the learner's whole history gives exactly the state the
new model would hold had it served that history; a shorter one is exact for
attention models whose receptive field fits in it and an approximation for
recurrent models (docs/finetuning.md).
"""

from __future__ import annotations

import sys
from typing import Any

from ktstream.core import LearnerState, WindowRecord
from ktstream.engine.decode import Decoded
from ktstream.serving.rebuild import rebuild_states
from ktstream.serving.runner import ModelRunner


def window_record(d: Decoded, seq: int) -> tuple:
    """The raw-window form of an applied event: a plain tuple in ``WindowRecord``'s field order, which the
    garbage collector stops tracking at its second look (the first untracks its concept tuple; ktstream.core);
    ids are interned (shared by every learner's window)."""
    e = d.event
    return (sys.intern(e.item_id), tuple(map(sys.intern, e.concept_ids)), e.response, d.event_time_ms, e.step_id,
            seq, e.event_id)


def as_event_record(learner_id: str, window_rec: tuple) -> dict[str, Any]:
    """A window record as a canonical event record (ktstream.data.histories)."""
    r = WindowRecord._make(window_rec)
    rec: dict[str, Any] = {"learner_id": learner_id, "item_id": r.item_id, "concept_ids": list(r.concept_ids),
                           "seq": r.seq}
    if r.response is not None:
        rec["response"] = r.response
    if r.event_time_ms is not None:
        rec["event_time"] = r.event_time_ms
    if r.step_id is not None:
        rec["step_id"] = r.step_id
    return rec


def rebuild_learners(runner: ModelRunner, stale: list[LearnerState]) -> list[LearnerState]:
    """New-version copies of ``stale`` learners, their states replayed from their raw windows in one batch."""
    if not stale:
        return []
    windows = {st.learner_id: [as_event_record(st.learner_id, r) for r in st.window] for st in stale}
    rebuilt = rebuild_states(runner.model, windows, runner.items, runner.concepts)
    out = []
    for st in stale:
        r = rebuilt[st.learner_id]
        new = st.copy()
        new.state, new.model_version = r.state, runner.version
        same_step = st.step_state is not None and r.step_key == st.step_key
        new.step_state = r.step_state if same_step else None
        out.append(new)
    return out
