"""Known-leaky variants of CL4KT and CORE, kept as fixtures the leakage gate must fail. Never registered.

(a) `PermutedTrainingCL4KT`: the augmentations applied to the prediction path. In training mode each
    learner's history is shuffled before it is predicted (the NLL scored on a permuted view), so later
    interactions, responses included, land in a target's context. Evaluation mode is honest, so only
    the training-mode runs of the checks can see it.
(b) `ResponseBiasCORE`: CORE whose "question-only" branch also embeds the response of the interaction it
    predicts (a bias branch fed the interaction instead of the query). Serving reads the event's
    response too, so training and serving agree, and only the perturbation checks can see it.
"""

from __future__ import annotations

import torch
from torch import nn

from ktstream.data.histories import Histories, Interactions
from ktstream.models.base import State
from ktstream.models.cl4kt import CL4KT
from ktstream.models.core import CoreKT


class PermutedTrainingCL4KT(CL4KT):
    name = "leaky-permuted-training-cl4kt"

    def forward(self, histories: Histories, state: State | None = None):
        if not self.training:
            return super().forward(histories, state)
        h = histories
        B, T = h.shape
        perm = torch.rand(B, T).argsort(1)  # THE BUG: a view feeds the predictions
        take = lambda x: x.gather(1, perm.view(B, T, *[1] * (x.dim() - 2)).expand_as(x))  # noqa: E731
        shuffled = Histories(take(h.items), take(h.concepts), take(h.responses), h.times,
                             torch.arange(T).expand(B, T).clone(), take(h.mask))
        log_probs, final = super().forward(shuffled, state)
        back = perm.argsort(1).unsqueeze(-1).expand_as(log_probs)
        return log_probs.gather(1, back), final


class ResponseBiasCORE(CoreKT):
    name = "leaky-response-bias-core"

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, **config):
        super().__init__(n_items, n_concepts, n_categories, **config)
        self.peek = nn.Embedding(n_categories, n_categories)  # THE BUG: the response in the bias branch

    def _bias(self, items, concepts, responses) -> torch.Tensor:
        return self.answer_bias(items, concepts) + self.peek(responses.clamp(min=0))

    def forward(self, histories: Histories, state: State | None = None):
        log_probs, final = self.base(histories, state)
        return self.debiased(log_probs, self._bias(histories.items, histories.concepts, histories.responses)), final

    def predict(self, state: State, query: Interactions, describe: bool = False, max_values: int | None = None):
        probs = self.base.predict(state, query)
        served = self.debiased(probs.log(), self._bias(query.items, query.concepts, query.responses)).exp()
        return (served, {}) if describe else served

    def prepare(self, interactions: Interactions) -> Interactions:
        return interactions


LEAKY_VARIANTS = {"permuted_training_cl4kt": PermutedTrainingCL4KT, "response_bias_core": ResponseBiasCORE}
