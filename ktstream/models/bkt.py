"""BKT: Bayesian Knowledge Tracing (Corbett & Anderson, User Modeling and User-Adapted Interaction, 1995).

One two-state hidden Markov model per concept: the learner has mastered it
(L) or not. Parameters per concept: the prior P(L0), the learning rate T
(not mastered -> mastered after an opportunity), the optional forgetting rate
F (Khajah, Lindsey & Mozer, EDM 2016; pyBKT, Badrinath et al., EDM 2021;
``forget: false``, the default, is F = 0 as in the original model), the guess
G = P(correct | not mastered) and the slip S = P(wrong | mastered). G and S
are kept below 0.5 by their parametrisation (0.5 * sigmoid), the usual guard
against degenerate fits where "mastered" predicts failure (Beck & Chang, UM
2007; Baker, Corbett & Aleven, ITS 2008). The state of a learner is P(L) of every concept (B, n_concepts).

An item tagged with several concepts is handled as the usual expansion of
multi-skill rows into one row per skill: every concept sees the response as if
it were its own opportunity (its
Bayesian posterior given the response, then the learning / forgetting
transition), and the prediction is the *mean* of the concepts' predictive
distributions. The mean, not the product: pyKT scores multi-concept questions
by averaging per-concept predictions, and a product would compound every
concept's guess and slip into a conjunctive model BKT was not fitted as. An
item tagged with no concept is traced on a pseudo-concept of its own, index 0
(the padding index, never a real concept); a concept first seen after
training is the unknown concept, index 1, with the initial parameters.

Responses with K > 2 ordered categories use binomial emissions: a mastered
learner's response k ~ Binomial(K - 1, 1 - S), an unmastered one's ~
Binomial(K - 1, G) (K = 2: the classic emissions), so guess and slip stay the
only emission parameters. Training is by gradient through ``forward``, the
exact forward (filtering) recursion of the HMMs, so the standard trainer fits
it; ``params()`` reads the fitted probabilities per concept, like pyBKT's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ktstream.data.histories import Histories, Interactions
from ktstream.models.base import Described, KTModel, State, StepFlags
from ktstream.models.families import register

#: Probabilities in the initial parameters (the logits are set from them).
INITIAL = {"prior": 0.5, "learn": 0.1, "guess": 0.2, "slip": 0.1, "forget": 0.02}
COLUMNS = ("prior", "learn", "guess", "slip", "forget")
EPS = 1e-12  # floor of a probability before its logarithm
# P(L) stays inside this range: at exactly 0 or 1 (or past 1, where m + (after - m) rounds) a response the
# mastery rules out has a likelihood near 0, and the posterior becomes 0/0 (NaN gradients on long
# histories). Inside it, with binary responses, the posterior's denominator is at least half the margin.
MASTERY_RANGE = (1e-6, 1 - 1e-6)


def concept_slots(concepts: torch.Tensor) -> torch.Tensor:
    """(..., C) concept ids (0: padding) -> (..., C) bool, the slots an interaction is traced on: each
    concept once (a concept listed twice counts once), and slot 0, the pseudo-concept 0, for an
    interaction tagged with none."""
    present = concepts > 0
    C = concepts.shape[-1]
    if C == 1:
        return torch.ones_like(present)  # its concept, or 0 for none
    same = concepts.unsqueeze(-1) == concepts.unsqueeze(-2)  # (..., C, C): slot i holds slot j's concept
    earlier = torch.ones(C, C, dtype=torch.bool, device=concepts.device).tril(-1)  # j < i
    keep = present & ~(same & earlier).any(-1)
    none = ~present.any(-1, keepdim=True)
    return torch.cat([keep[..., :1] | none, keep[..., 1:]], -1)


def binomial_emission(p: torch.Tensor, K: int) -> torch.Tensor:
    """(...) probability of success -> (..., K) P(response = k) = Binomial(k; K - 1, p)."""
    if K == 2:
        return torch.stack([1 - p, p], -1)
    k = torch.arange(K, dtype=p.dtype, device=p.device)
    n = K - 1
    log_choose = torch.lgamma(torch.tensor(n + 1.0, dtype=p.dtype, device=p.device)) \
        - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
    p = p.unsqueeze(-1)
    return torch.exp(log_choose + k * torch.log(p.clamp(min=EPS)) + (n - k) * torch.log((1 - p).clamp(min=EPS)))


@register
class BKT(KTModel):
    name = "bkt"
    carries_state = True
    #: forgetting on and the concepts' parameters spread, so that the contract tests exercise both
    tiny_config = {"forget": True, "init_scale": 1.0}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, forget: bool = False,
                 init_scale: float = 0.0):
        """``init_scale``: standard deviation of noise added to the initial logits (0: every concept
        starts from the same probabilities, ``INITIAL``)."""
        super().__init__(n_items, n_concepts, n_categories)
        self.forget, self.init_scale = forget, init_scale
        columns = COLUMNS if forget else COLUMNS[:4]
        init = []
        for c in columns:
            p = 2 * INITIAL[c] if c in ("guess", "slip") else INITIAL[c]  # their sigmoid is scaled by 0.5
            init.append(math.log(p / (1 - p)))
        #: (n_concepts, 4 or 5) logits of prior, learn, guess, slip[, forget], one row per concept
        logits = torch.tensor(init).repeat(n_concepts, 1)
        if init_scale > 0:
            logits = logits + init_scale * torch.randn_like(logits)
        self.logits = nn.Parameter(logits)

    def config(self) -> dict[str, Any]:
        return dict(n_items=self.n_items, n_concepts=self.n_concepts, n_categories=self.n_categories,
                    forget=self.forget, init_scale=self.init_scale)

    # -- parameters ------------------------------------------------------
    def probabilities(self) -> dict[str, torch.Tensor]:
        """(n_concepts,) prior, learn, forget, guess, slip of every concept."""
        z = torch.sigmoid(self.logits)
        forget = z[:, 4] if self.forget else torch.zeros_like(z[:, 0])
        return {"prior": z[:, 0], "learn": z[:, 1], "forget": forget, "guess": 0.5 * z[:, 2],
                "slip": 0.5 * z[:, 3]}

    def params(self) -> dict[int, dict[str, float]]:
        """Concept vocabulary index -> {prior, learn, forget, guess, slip}: 0 is the pseudo-concept of
        items tagged with none, 1 the unknown concept (concepts first seen after training)."""
        with torch.no_grad():
            p = {k: v.tolist() for k, v in self.probabilities().items()}
        return {c: {k: p[k][c] for k in ("prior", "learn", "forget", "guess", "slip")}
                for c in range(self.n_concepts)}

    def _slots(self, concepts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """(..., C) concepts -> the ids read (0 for none), each slot's weight in the mean
        (..., C), and per slot: emissions e1 / e0 (..., C, K), learn / forget (..., C), and
        ``keep`` (..., C), the slot holds a concept not listed before it."""
        ids = concepts
        keep = concept_slots(ids)
        weight = keep / keep.sum(-1, keepdim=True)
        p = self.probabilities()
        K = self.n_categories
        slot = {"e1": binomial_emission(1 - p["slip"][ids], K), "e0": binomial_emission(p["guess"][ids], K),
                "learn": p["learn"][ids], "forget": p["forget"][ids], "keep": keep}
        return ids, weight.to(slot["learn"].dtype), slot

    @staticmethod
    def _log_probs(mastery: torch.Tensor, weight: torch.Tensor, slot: dict[str, torch.Tensor]) -> torch.Tensor:
        """P(L) of the slots (..., C) -> log of the mean predictive distribution (..., K)."""
        m = mastery.unsqueeze(-1)
        per_slot = m * slot["e1"] + (1 - m) * slot["e0"]  # (..., C, K)
        return torch.log((weight.unsqueeze(-1) * per_slot).sum(-2).clamp(min=EPS))

    @staticmethod
    def _likelihoods(responses: torch.Tensor, slot: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(...) responses -> P(response | mastered), P(response | not mastered) of each slot (..., C)."""
        r = responses.clamp(min=0).unsqueeze(-1).unsqueeze(-1).expand(*slot["keep"].shape, 1)
        return slot["e1"].gather(-1, r).squeeze(-1), slot["e0"].gather(-1, r).squeeze(-1)

    @staticmethod
    def _next(mastery: torch.Tensor, ids: torch.Tensor, like1: torch.Tensor, like0: torch.Tensor,
              slot: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each of the item's concepts: posterior given the response's likelihoods (B, C), then the
        transition; (B, n_concepts)."""
        m = mastery.gather(1, ids)  # (B, C)
        mc = m.clamp(*MASTERY_RANGE)
        joint1 = mc * like1
        post = joint1 / (joint1 + (1 - mc) * like0).clamp(min=EPS)
        after = post * (1 - slot["forget"]) + (1 - post) * slot["learn"]
        # as a change: padding slots and a concept's second listing add 0 (to column 0, or the concept)
        return mastery.scatter_add(1, ids, torch.where(slot["keep"], after - m, 0)).clamp(*MASTERY_RANGE)

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        B, T = histories.shape
        if state is None:
            mastery = self.probabilities()["prior"].unsqueeze(0).expand(B, -1)  # the prior, trained
        else:
            mastery = state["mastery"]
        ids, weight, slot = self._slots(histories.concepts)  # (B, T, C), ...
        like1, like0 = self._likelihoods(histories.responses, slot)
        # the loop carries only what depends on the previous step: the emissions, likelihoods and the
        # predictive distributions are computed for every position at once, outside it
        f = StepFlags.of(histories)
        per_step = zip(ids.unbind(1), like1.unbind(1), like0.unbind(1), slot["learn"].unbind(1),
                       slot["forget"].unbind(1), slot["keep"].unbind(1), f.starts.unbind(1), f.applied.unbind(1))
        at_step_start, read = mastery, []
        for t, (i, l1, l0, learn, forget, keep, starts, applies) in enumerate(per_step):
            at_step_start = mastery if f.all_start[t] else torch.where(starts.view(B, 1), mastery, at_step_start)
            read.append(at_step_start.gather(1, i))
            if f.any_applied[t]:
                after = self._next(mastery, i, l1, l0, {"learn": learn, "forget": forget, "keep": keep})
                mastery = after if f.all_applied[t] else torch.where(applies.view(B, 1), after, mastery)
        if not read:
            return mastery.new_zeros(B, 0, self.n_categories), {"mastery": mastery}
        return self._log_probs(torch.stack(read, 1), weight, slot), {"mastery": mastery}

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        prior = self.probabilities()["prior"].detach()
        return {"mastery": prior.unsqueeze(0).expand(batch_size, -1).clone()}

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        ids, weight, slot = self._slots(query.concepts)
        probs = self._log_probs(state["mastery"].gather(1, ids), weight, slot).exp()
        if not describe:
            return probs
        # kept whatever ``max_values``: a prediction reports the mastery of its event's concepts only
        return probs, {"mastery": state["mastery"].clone()}

    def update(self, state: State, interaction: Interactions) -> State:
        ids, _, slot = self._slots(interaction.concepts)
        like1, like0 = self._likelihoods(interaction.responses, slot)
        return {"mastery": self._next(state["mastery"], ids, like1, like0, slot)}
