"""Leaks of the classic families, kept as fixtures the leakage gate must fail. Never registered;
their serving paths are the honest families'.

- ``PosteriorBKT``: scores position t with the filtered P(L) *after* t's own response (the
  posterior that BKT code keeps per row, read one row too late), instead of P(L) before t's step.
- ``InclusiveCountsPFA``: PFA's success / failure counts taken as a cumulative sum that includes
  the row being predicted (a cumsum not shifted by one).
- ``StepMateBKT``: ignores steps, so a step's earlier members' responses reach its later members
  (the per-row recursion of pyBKT-style code, run on bundles answered at once).
"""

from __future__ import annotations

import torch

from ktstream.data.histories import Histories
from ktstream.models.base import State
from ktstream.models.bkt import BKT
from ktstream.models.logistic import IRTPFA


class PosteriorBKT(BKT):
    name = "leaky-posterior-bkt"

    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        B, T = histories.shape
        mastery = state["mastery"] if state is not None else self.probabilities()["prior"].unsqueeze(0).expand(B, -1)
        ids, weight, slot = self._slots(histories.concepts)
        out = []
        for t in range(T):
            here = {k: v[:, t] for k, v in slot.items()}
            after = self._next(mastery, ids[:, t], histories.responses[:, t], here)
            mastery = torch.where(histories.applied[:, t].view(B, 1), after, mastery)
            out.append(self._log_probs(mastery.gather(1, ids[:, t]), weight[:, t], here))  # THE BUG: after t
        return torch.stack(out, 1), {"mastery": mastery}


class StepMateBKT(BKT):
    name = "leaky-step-mate-bkt"

    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        every_row_a_step = torch.arange(histories.shape[1]).expand_as(histories.step_start)  # THE BUG
        return super().forward(histories.replace(step_start=every_row_a_step), state)


class InclusiveCountsPFA(IRTPFA):
    name = "leaky-inclusive-pfa"

    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        B, T = histories.shape
        state = state if state is not None else self.init_state(B)
        ids, keep = self._slots(histories.concepts)
        read, overall = [], []
        with torch.no_grad():
            for t in range(T):
                after = self._counted(state, ids[:, t], keep[:, t], histories.responses[:, t])
                a = histories.applied[:, t]
                state = {"counts": torch.where(a.view(B, 1, 1), after["counts"], state["counts"]),
                         "overall": torch.where(a.view(B, 1), after["overall"], state["overall"])}
                read.append(state["counts"].gather(1, ids[:, t].unsqueeze(-1).expand(-1, -1, 2)))  # THE BUG
                overall.append(state["overall"])
        counts, totals = torch.stack(read, 1), torch.stack(overall, 1)
        return self._log_probs(histories.items, ids, keep.to(counts.dtype), counts, totals), state
