"""DisKT with the published contradiction attention (DisKT's ``contradictory_attention``, as first
released), kept as a fixture the leakage gate must fail. Never registered.

The published version softmaxed the causally masked scores, set the weights of contradictory
interactions to 0 and applied softmax again without masking: every zero, the future keys'
included, came back as ``exp(0)/sum``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ktstream.models.attention import softmax_of_columns
from ktstream.models.diskt import ContradictionAttention, DisKT


class PublishedContradictionAttention(ContradictionAttention):
    def weights(self, x: torch.Tensor, k: torch.Tensor, visible: torch.Tensor, flagged: torch.Tensor) -> torch.Tensor:
        w = softmax_of_columns(self.logits(x, k, visible))  # masked keys: exactly 0
        keys = w[..., 1:].masked_fill(flagged.unsqueeze(1).unsqueeze(2), 0.0)  # contradictory keys zeroed
        return F.softmax(torch.cat([w[..., :1], keys], -1), -1)  # THE BUG: softmax again, nothing masked


class LeakyDisKT(DisKT):
    name = "leaky-diskt-second-softmax"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.contra.__class__ = PublishedContradictionAttention
