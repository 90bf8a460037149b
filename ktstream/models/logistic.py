"""IRT-PFA: a logistic model of item difficulty, learner ability and per-concept practice counts.

The logit of a correct response to item i tagged with concepts c (each
concept counted once) is

    x = -b_i + sum_c (beta_c + gamma_c f(s_c) + rho_c f(n_c)) + w_s f(S) + w_f f(N)

- ``b_i``: item difficulty, the Rasch model's (Rasch 1960; Lord 1980) item
  parameter (``items: false`` drops it);
- ``beta_c, gamma_c, rho_c``: Performance Factors Analysis (Pavlik, Cen &
  Koedinger, AIED 2009): a concept's easiness and the weights of the learner's
  earlier successes s_c and failures n_c on it (``pfa: false`` keeps only
  beta_c);
- ``w_s, w_f``: the learner's ability. IRT's theta is a per-learner parameter
  fitted on the learner's own responses, which a streaming model cannot have:
  learners are new at serving time. Ability is instead estimated online from
  the learner's history, as the weighted overall success and failure counts S
  and N over every concept (the learner-level count features of Logistic
  Knowledge Tracing, Pavlik, Eglington & Harrell-Williams, IEEE TLT 2021);
  ``ability: false`` drops it.

f is log(1 + count) by default (``log_counts``, as in LKT: raw counts make the
logit grow without bound on long histories); ``log_counts: false`` is
classic PFA's raw counts. With K > 2 ordered categories a response k counts
k / (K - 1) success and the rest failure (partial credit), and x is the
ability of Andrich's rating scale model, P(Y = k) proportional to
exp(sum_{h<k} (x - tau_h)) with tau_0 = 0 (the item and concept terms fix
the location) and the other thresholds learned; K = 2 is the logistic model
above. The state of a learner is its counts: per concept (B, n_concepts, 2)
[successes, failures] and overall (B, 2). Only the coefficients are trained,
so the model is a logistic regression on count features, convex in them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ktstream.data.histories import Histories, Interactions
from ktstream.models.base import Described, KTModel, State
from ktstream.models.bkt import concept_slots
from ktstream.models.families import register
from ktstream.models.ordinal import gpcm_log_probs


@register
class IRTPFA(KTModel):
    name = "irt-pfa"
    carries_state = True
    #: random coefficients, so that the contract tests exercise every term
    tiny_config: dict[str, Any] = {"init_scale": 0.5}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, items: bool = True,
                 pfa: bool = True, ability: bool = True, log_counts: bool = True, init_scale: float = 0.0):
        """``init_scale``: standard deviation of the initial coefficients (0: all start at 0, which
        suits a convex fit)."""
        super().__init__(n_items, n_concepts, n_categories)
        self.items, self.pfa, self.ability, self.log_counts = items, pfa, ability, log_counts
        self.init_scale = init_scale
        self.difficulty = nn.Embedding(n_items, 1) if items else None  # b_i
        #: (n_concepts, 3) beta, gamma, rho per concept (gamma, rho unused with ``pfa: false``)
        self.concept = nn.Parameter(torch.zeros(n_concepts, 3))
        self.learner = nn.Parameter(torch.zeros(2))  # w_s, w_f
        self.thresholds = nn.Parameter(torch.zeros(max(n_categories - 2, 0)))  # tau_1 .. tau_{K-2}
        for p in self.parameters():
            nn.init.normal_(p, std=init_scale) if init_scale > 0 else nn.init.zeros_(p)

    def config(self) -> dict[str, Any]:
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories,
                    items=self.items, pfa=self.pfa, ability=self.ability, log_counts=self.log_counts,
                    init_scale=self.init_scale)

    def coefficients(self) -> dict[str, Any]:
        """The fitted coefficients: per concept vocabulary index {beta, gamma, rho} (0: the pseudo-concept
        of items tagged with none, as in ``bkt``), the ability weights
        {w_s, w_f}, and per item index the difficulty b (empty without ``items``)."""
        with torch.no_grad():
            c = self.concept.tolist()
            b = self.difficulty.weight[:, 0].tolist() if self.difficulty is not None else []
            w = self.learner.tolist()
        return {"concepts": {i: dict(zip(("beta", "gamma", "rho"), c[i])) for i in range(self.n_concepts)},
                "ability": {"w_s": w[0], "w_f": w[1]}, "difficulty": {i: b[i] for i in range(1, len(b))}}

    # -- blocks ----------------------------------------------------------
    def _f(self, counts: torch.Tensor) -> torch.Tensor:
        return torch.log1p(counts) if self.log_counts else counts

    def _credit(self, responses: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(B,) responses -> (B, 2) [success, failure] credit (partial for K > 2)."""
        s = responses.clamp(min=0).to(dtype) / (self.n_categories - 1)
        return torch.stack([s, 1 - s], -1)

    def _concept_logits(self, ids: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Concept terms beta + gamma f(s) + rho f(n) for concept ids (...) with counts (..., 2)."""
        coef = self.concept[ids]  # (..., 3)
        x = coef[..., 0]
        if self.pfa:
            x = x + (coef[..., 1:] * self._f(counts)).sum(-1)
        return x

    def _theta(self, overall: torch.Tensor) -> torch.Tensor:
        """(..., 2) overall counts -> (...) the ability term."""
        if not self.ability:
            return overall.new_zeros(overall.shape[:-1])
        return (self.learner * self._f(overall)).sum(-1)

    def _log_probs(self, items: torch.Tensor, ids: torch.Tensor, keep: torch.Tensor, counts: torch.Tensor,
                   overall: torch.Tensor) -> torch.Tensor:
        """items (...), concept slots ids / keep (..., C), their counts (..., C, 2), overall counts
        (..., 2) -> log-probs (..., K)."""
        x = (self._concept_logits(ids, counts) * keep).sum(-1) + self._theta(overall)
        if self.difficulty is not None:
            x = x - self.difficulty(items)[..., 0]
        tau = torch.cat([x.new_zeros(1), self.thresholds])
        return gpcm_log_probs(x, torch.ones_like(x), tau)

    @staticmethod
    def _slots(concepts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return concepts, concept_slots(concepts)

    def _counted(self, state: State, ids: torch.Tensor, keep: torch.Tensor, responses: torch.Tensor) -> State:
        """The counts after one response per learner to the concepts ``ids`` (B, C)."""
        counts = state["counts"]
        credit = self._credit(responses, counts.dtype)  # (B, 2)
        added = keep.unsqueeze(-1).to(counts.dtype) * credit.unsqueeze(1)  # (B, C, 2): 0 for padding, repeats
        return {"counts": counts.scatter_add(1, ids.unsqueeze(-1).expand(-1, -1, 2), added),
                "overall": state["overall"] + credit}

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        B, T = histories.shape
        state = state if state is not None else self.init_state(B)
        ids, keep = self._slots(histories.concepts)  # (B, T, C)
        applied = histories.applied
        with torch.no_grad():  # the counts are data: only the coefficients carry gradients
            at_step_start = state
            read, overall = [], []
            for t in range(T):
                new_step = histories.step_start[:, t] == t
                at_step_start = {k: torch.where(new_step.view(B, *([1] * (v.dim() - 1))), state[k], v)
                                 for k, v in at_step_start.items()}
                index = ids[:, t].unsqueeze(-1).expand(-1, -1, 2)
                read.append(at_step_start["counts"].gather(1, index))  # (B, C, 2)
                overall.append(at_step_start["overall"])
                if bool(applied[:, t].any()):
                    after = self._counted(state, ids[:, t], keep[:, t], histories.responses[:, t])
                    a = applied[:, t]
                    state = {"counts": torch.where(a.view(B, 1, 1), after["counts"], state["counts"]),
                             "overall": torch.where(a.view(B, 1), after["overall"], state["overall"])}
            dtype = state["counts"].dtype
            counts = torch.stack(read, 1) if read else ids.new_zeros(B, 0, ids.shape[2], 2).to(dtype)
            totals = torch.stack(overall, 1) if overall else counts.new_zeros(B, 0, 2)
        return self._log_probs(histories.items, ids, keep.to(dtype), counts, totals), state

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        p = self.concept
        return {"counts": torch.zeros(batch_size, self.n_concepts, 2, dtype=p.dtype, device=p.device),
                "overall": torch.zeros(batch_size, 2, dtype=p.dtype, device=p.device)}

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        ids, keep = self._slots(query.concepts)
        counts = state["counts"].gather(1, ids.unsqueeze(-1).expand(-1, -1, 2))
        probs = self._log_probs(query.items, ids, keep.to(counts.dtype), counts, state["overall"]).exp()
        if not describe:
            return probs
        theta = self._theta(state["overall"])  # (B,)
        extras: dict[str, torch.Tensor] = {}
        if self.ability:
            extras["ability"] = theta.unsqueeze(-1)
        # per concept, P(correct) on an item of difficulty 0 tagged with that concept alone; kept whatever
        # ``max_values``: a prediction reports the mastery of its event's concepts only
        every = torch.arange(self.n_concepts, device=theta.device)
        extras["mastery"] = torch.sigmoid(self._concept_logits(every, state["counts"]) + theta.unsqueeze(-1))
        return probs, extras

    def update(self, state: State, interaction: Interactions) -> State:
        ids, keep = self._slots(interaction.concepts)
        return self._counted(state, ids, keep, interaction.responses)
