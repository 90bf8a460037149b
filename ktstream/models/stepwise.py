"""Drive the serving path over padded histories, the way the engine does.

For every position: the queries of a step are predicted from the state as it
was when the step began, then each interaction updates the state. Used by the
prequential evaluation, the equivalence tests and the leakage gate; ``attention_map``
steps one learner through the same way and keeps what an attention model read at every
position (``ktstream explain``, the HTML report's attention figure).
"""

from __future__ import annotations

import numpy as np
import torch

from ktstream.data.histories import Histories
from ktstream.models.base import KTModel, State, where_state


@torch.inference_mode()
def predict_stepwise(model: KTModel, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
    """Serving-path predictions (B, T, K) for every position, and the final state."""
    B, T = histories.shape
    state = state if state is not None else model.init_state(B)
    at_step_start = state
    out = []
    for t in range(T):
        new_step = histories.step_start[:, t] == t
        at_step_start = where_state(new_step, state, at_step_start)
        query = histories.at(t)
        out.append(model.predict(at_step_start, query))
        valid = histories.mask[:, t] & (histories.responses[:, t] >= 0)
        if bool(valid.any()):
            state = where_state(valid, model.update(state, query), state)
    return torch.stack(out, dim=1), state


@torch.inference_mode()
def attention_map(model: KTModel, hist: Histories) -> tuple[np.ndarray, list[dict]]:
    """(T, 1 + T) weights (column 0: no history) and the per-position ``describe`` outputs of one learner."""
    T = hist.shape[1]
    heat = np.zeros((T, T + 1))
    state = model.init_state(1)
    at_step_start, infos = state, []
    for t in range(T):
        if int(hist.step_start[0, t]) == t:
            at_step_start = state
        _, info = model.predict(at_step_start, hist.at(t), describe=True)
        pos, w = info["attention_positions"][0], info["attention"][0]
        keep = pos >= 0
        heat[t, 1 + pos[keep].numpy()] = w[keep].numpy()
        heat[t, 0] = float(info["attention_null"][0])
        infos.append({k: v[0] for k, v in info.items()})
        if int(hist.responses[0, t]) >= 0:
            state = model.update(state, hist.at(t))
    return heat, infos
