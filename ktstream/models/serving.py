"""Drive the serving path over padded histories, the way the engine does.

For every position: the queries of a step are predicted from the state as it
was when the step began, then each interaction updates the state. Used by the
prequential evaluation, the equivalence tests and the leakage gate.
"""

from __future__ import annotations

import torch

from ktstream.data.histories import Histories
from ktstream.models.base import KTModel, State, where_state


@torch.inference_mode()
def replay(model: KTModel, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
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
