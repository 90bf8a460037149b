"""Deep-IRT (Yeung, EDM 2019, "Deep-IRT: Make Deep Learning Based Knowledge Tracing Explainable
Using Item Response Theory"): DKVMN whose prediction is an IRT model of two explained numbers.

The DKVMN summary f of (memory read, item key) gives the learner's ability and the item key k
alone the item's difficulty, as in the paper (its equations for theta, beta and p):

    ability    theta = tanh(W_theta f + b_theta)        in (-1, 1)
    difficulty beta  = tanh(W_beta  k + b_beta)         in (-1, 1)
    p(correct) = sigmoid(3.0 * theta - beta)

The difficulty depends on the item only, so it is the same for every learner; the ability moves
with the memory. Both come out of ``predict(..., describe=True)`` as ``ability`` and
``difficulty``. (The authors' released code leaves theta without the tanh; pyKT keeps it, as
the paper does, and so does this family.)

Relation to ``deep-gpcm`` (ktstream.models.ordinal): with K=2 Deep-GPCM is the 2PL model
sigmoid(alpha (theta - beta)). Deep-IRT is not that family with K=2 as it stands: Deep-GPCM
learns a discrimination alpha > 0 per item, its theta and beta are unbounded linear maps, and
its theta is anchored to a learner with no history. Deep-IRT is Deep-GPCM at K=2 with alpha
fixed at 1, no anchor, ability scale 3.0 and a tanh on both parameter networks; the test
(tests/models/test_deep_irt.py) builds Deep-GPCM so and checks the two agree to 1e-6.

For K > 2 (ordered partial credit) the same head is the partial credit model (GPCM with
alpha = 1): K-1 thresholds from the item key, ordered by construction and bounded by the tanh
(a monotone map keeps their order); ``difficulty`` is then their mean, the item's location,
and ``thresholds`` all of them. With K=2 it is exactly the paper's model.
"""

from __future__ import annotations

import torch
from torch import nn

from ktstream.data.histories import Interactions
from ktstream.models.base import Described, State
from ktstream.models.dkvmn import DKVMN
from ktstream.models.families import register
from ktstream.models.ordinal import gpcm_log_probs, ordered

ABILITY_SCALE = 3.0  # the paper's fixed factor on theta


class DeepIRTHead(nn.Module):
    """(summary (..., S), key (..., Dk)) -> log-probs (..., K) of sigmoid(3 theta - beta) (K=2), or the
    partial credit model of the same ability and K-1 bounded thresholds. Parameter names match
    ``ordinal.GPCMHead``'s (``theta_net``, ``beta_net``, ``gap_net``)."""

    def __init__(self, summary_dim: int, key_dim: int, n_categories: int):
        super().__init__()
        self.theta_net = nn.Linear(summary_dim, 1)
        self.beta_net = nn.Linear(key_dim, 1)  # the first threshold (K=2: the difficulty)
        self.gap_net = nn.Linear(key_dim, n_categories - 2) if n_categories > 2 else None

    def ability(self, summary: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.theta_net(summary)).squeeze(-1)  # (...)

    def thresholds(self, key: torch.Tensor) -> torch.Tensor:
        """(..., K-1) increasing, in (-1, 1): the item's difficulty (K=2) or its category thresholds."""
        return torch.tanh(ordered(self.beta_net(key), self.gap_net(key) if self.gap_net is not None else None))

    def forward(self, summary: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        theta = self.ability(summary)
        return gpcm_log_probs(ABILITY_SCALE * theta, torch.ones_like(theta), self.thresholds(key))

    def describe(self, summary: torch.Tensor, key: torch.Tensor) -> dict[str, torch.Tensor]:
        betas = self.thresholds(key)
        out = {"ability": self.ability(summary), "difficulty": betas.mean(-1)}
        return out | ({"thresholds": betas} if betas.shape[-1] > 1 else {})


@register
class DeepIRT(DKVMN):
    name = "deep-irt"
    tiny_config = DKVMN.tiny_config

    def _make_head(self) -> nn.Module:
        return DeepIRTHead(self.summary_dim, self.key_dim, self.n_categories)

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        """With ``describe``: ``ability`` (B,) theta of this learner on this item, ``difficulty`` (B,)
        beta of the item (K > 2: the mean threshold, and ``thresholds`` (B, K-1)); the prediction is
        sigmoid(3.0 * ability - difficulty) for K=2."""
        key, weights = self._address_of(query)
        summary = torch.tanh(self.summary(torch.cat([self._read(weights, state["memory"]), key], dim=-1)))
        probs = self.head(self.drop(summary), key).exp()
        return (probs, self.head.describe(summary, key)) if describe else probs
