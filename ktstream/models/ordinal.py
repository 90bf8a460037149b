"""Ordinal knowledge tracing on DKVMN: the Deep-GPCM head, a CORAL head and their blend.

Deep-GPCM (after Deep-IRT, Yeung 2019, with Muraki's generalized partial
credit model): the DKVMN summary of (memory read, item key) gives the ability
theta; the item key alone gives the discrimination alpha > 0 and K-1
thresholds beta, ordered by construction (the first threshold plus cumulative
softplus increments, never unconstrained). Category k has cumulative logit
Z_k = sum_{h<k} alpha (theta - beta_h), Z_0 = 0, and P(Y=k) = softmax_k(Z);
with K=2 this is the 2PL IRT model. By default theta is *anchored*: the head's
ability of this learner minus that of a learner with no history on the same
item, so a new learner has theta = 0 everywhere and the item's difficulty
must live in its betas (unanchored, theta soaks it up through the item key).
CORAL (Cao et al. 2020) instead puts one latent score g through K-1 global,
ordered thresholds tau: P(Y>k) = sigmoid(g - tau_k), rank-consistent by
construction. Letters: B learners, T positions, N memory slots, K categories,
D width.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ktstream.data.histories import Histories, Interactions, applied_first
from ktstream.models.base import Described, State
from ktstream.models.dkvmn import DKVMN
from ktstream.models.ordinal_embeddings import RESPONSE_EMBEDDINGS, CausalRefiner, OrdinalInteractionEmbedding
from ktstream.models.families import register

CORAL_EPS = 1e-6  # floor of a CORAL category probability before renormalising
MIN_GAP = 1e-3  # smallest threshold increment: softplus alone underflows to 0 in fp32 for very negative inputs


def ordered(first: torch.Tensor, raw_gaps: torch.Tensor | None) -> torch.Tensor:
    """(..., 1) first threshold and (..., K-2) raw increments -> (..., K-1) strictly increasing thresholds."""
    if raw_gaps is None or raw_gaps.shape[-1] == 0:
        return first
    return torch.cat([first, first + (F.softplus(raw_gaps) + MIN_GAP).cumsum(-1)], dim=-1)


def gpcm_log_probs(theta: torch.Tensor, alpha: torch.Tensor, betas: torch.Tensor) -> torch.Tensor:
    """theta, alpha (...), betas (..., K-1) -> log P(Y=k) (..., K) via Z_k = sum_{h<k} alpha (theta - beta_h)."""
    steps = alpha.unsqueeze(-1) * (theta.unsqueeze(-1) - betas)  # (..., K-1)
    z = torch.cat([torch.zeros_like(steps[..., :1]), steps.cumsum(-1)], dim=-1)  # (..., K), Z_0 = 0
    return F.log_softmax(z, dim=-1)


def irt_2pl_log_probs(theta: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The binary 2PL model: P(Y=1) = sigmoid(alpha (theta - beta)) -> (..., 2) log-probs."""
    x = alpha * (theta - beta)
    return torch.stack([F.logsigmoid(-x), F.logsigmoid(x)], dim=-1)


def coral_log_probs(cum_logits: torch.Tensor) -> torch.Tensor:
    """(..., K-1) logits of P(Y>k) -> (..., K) log P(Y=k).

    P(Y=k) = P(Y>k-1) - P(Y>k) with P(Y>-1) = 1 and P(Y>K-1) = 0. Ordered
    thresholds make these differences non-negative in exact arithmetic; in
    floating point they are clamped at CORAL_EPS and renormalised to sum to 1.
    """
    above = torch.sigmoid(cum_logits)
    ext = torch.cat([torch.ones_like(above[..., :1]), above, torch.zeros_like(above[..., :1])], dim=-1)
    probs = (ext[..., :-1] - ext[..., 1:]).clamp(min=CORAL_EPS)
    return torch.log(probs / probs.sum(-1, keepdim=True))


class GPCMHead(nn.Module):
    """(summary (..., S), key (..., Dk)) -> GPCM log-probs (..., K); theta from summary, alpha/betas from key."""

    def __init__(self, summary_dim: int, key_dim: int, n_categories: int, ability_scale: float = 1.0):
        super().__init__()
        self.K, self.ability_scale = n_categories, ability_scale
        self.theta_net = nn.Linear(summary_dim, 1)
        self.alpha_net = nn.Linear(key_dim, 1)
        self.beta_net = nn.Linear(key_dim, 1)  # the first threshold
        self.gap_net = nn.Linear(key_dim, n_categories - 2) if n_categories > 2 else None

    def ability(self, summary: torch.Tensor) -> torch.Tensor:
        return self.ability_scale * self.theta_net(summary).squeeze(-1)  # (...)

    def item_parameters(self, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """key (..., Dk) -> alpha (...) > 0 and betas (..., K-1) increasing: they depend on the item only."""
        alpha = F.softplus(self.alpha_net(key)).squeeze(-1)
        return alpha, ordered(self.beta_net(key), self.gap_net(key) if self.gap_net is not None else None)

    def irt(self, summary: torch.Tensor, key: torch.Tensor,
            anchor: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """theta (relative to ``anchor``'s when given), alpha, betas."""
        theta = self.ability(summary) if anchor is None else self.ability(summary) - self.ability(anchor)
        return (theta, *self.item_parameters(key))

    def forward(self, summary: torch.Tensor, key: torch.Tensor, anchor: torch.Tensor | None = None) -> torch.Tensor:
        return gpcm_log_probs(*self.irt(summary, key, anchor))

    def describe(self, summary: torch.Tensor, key: torch.Tensor,
                 anchor: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        theta, alpha, betas = self.irt(summary, key, anchor)
        return {"theta": theta, "alpha": alpha, "betas": betas}


class IRTHead(GPCMHead):
    """The binary 2PL head (Deep-IRT): the same parameter networks with K=2, sigmoid link."""

    def __init__(self, summary_dim: int, key_dim: int, ability_scale: float = 1.0):
        super().__init__(summary_dim, key_dim, 2, ability_scale)

    def forward(self, summary: torch.Tensor, key: torch.Tensor, anchor: torch.Tensor | None = None) -> torch.Tensor:
        theta, alpha, betas = self.irt(summary, key, anchor)
        return irt_2pl_log_probs(theta, alpha, betas[..., 0])


class CoralHead(nn.Module):
    """One latent score g from the summary and K-1 global ordered thresholds tau (not the item betas)."""

    def __init__(self, summary_dim: int, n_categories: int):
        super().__init__()
        self.score = nn.Linear(summary_dim, 1)
        self.tau_first = nn.Parameter(torch.tensor([-1.0]))
        # softplus(0.5413) = 1: thresholds start one unit apart.
        self.tau_gaps = nn.Parameter(torch.full((n_categories - 2,), 0.5413))

    def thresholds(self) -> torch.Tensor:
        return ordered(self.tau_first, self.tau_gaps)  # (K-1,)

    def cumulative_logits(self, summary: torch.Tensor) -> torch.Tensor:
        return self.score(summary) - self.thresholds()  # (..., 1) - (K-1,) -> (..., K-1)

    def forward(self, summary: torch.Tensor, key: torch.Tensor, anchor: torch.Tensor | None = None) -> torch.Tensor:
        return coral_log_probs(self.cumulative_logits(summary))  # no anchor: g must carry the item's difficulty

    def describe(self, summary: torch.Tensor, key: torch.Tensor,
                 anchor: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        g = self.score(summary).squeeze(-1)
        return {"coral_score": g, "tau": self.thresholds().expand(*g.shape, -1)}


class BlendHead(nn.Module):
    """Adaptive blend: w * GPCM + (1 - w) * CORAL, w = sigmoid(gate(summary)) per prediction."""

    def __init__(self, summary_dim: int, key_dim: int, n_categories: int, ability_scale: float = 1.0):
        super().__init__()
        self.gpcm = GPCMHead(summary_dim, key_dim, n_categories, ability_scale)
        self.coral = CoralHead(summary_dim, n_categories)
        self.gate = nn.Linear(summary_dim, 1)

    def forward(self, summary: torch.Tensor, key: torch.Tensor, anchor: torch.Tensor | None = None) -> torch.Tensor:
        g = self.gate(summary)  # (..., 1)
        return torch.logaddexp(F.logsigmoid(g) + self.gpcm(summary, key, anchor),
                               F.logsigmoid(-g) + self.coral(summary, key))

    def describe(self, summary: torch.Tensor, key: torch.Tensor,
                 anchor: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        out = self.gpcm.describe(summary, key, anchor) | self.coral.describe(summary, key)
        return out | {"gpcm_weight": torch.sigmoid(self.gate(summary)).squeeze(-1)}


class OrdinalDKVMN(DKVMN):
    """DKVMN with an ordinal interaction embedding (and optional causal refinement) and an IRT-style head.

    Not registered itself: the registered families below differ only in their head.
    ``response_embedding``: one of RESPONSE_EMBEDDINGS. ``attention_window`` W > 0
    refines each written value by attention over the W interactions before it;
    the W raw embeddings then travel in the serving state. ``anchored``: theta
    relative to a learner with no history (GPCM heads; CORAL's score is never anchored).
    """

    name = "ordinal-dkvmn"
    tiny_config = {"memory_size": 5, "key_dim": 8, "value_dim": 12, "summary_dim": 8}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, memory_size: int = 20,
                 key_dim: int = 50, value_dim: int = 100, summary_dim: int = 50, dropout: float = 0.0,
                 use_items: bool = True, response_embedding: str = "linear_decay", attention_window: int = 0,
                 ability_scale: float = 1.0, anchored: bool = True):
        if response_embedding not in RESPONSE_EMBEDDINGS:
            raise ValueError(f"response_embedding must be one of {RESPONSE_EMBEDDINGS}, got {response_embedding!r}")
        if attention_window < 0:
            raise ValueError(f"attention_window must be >= 0 (0 = off), got {attention_window}")
        self.ability_scale = ability_scale  # read by _make_head inside DKVMN.__init__
        super().__init__(n_items, n_concepts, n_categories, memory_size, key_dim, value_dim, summary_dim,
                         dropout, use_items)
        self.response_embedding, self.attention_window = response_embedding, attention_window
        self.anchored = anchored
        self.interaction = OrdinalInteractionEmbedding(n_items, n_concepts, n_categories, value_dim, use_items,
                                                       response_embedding)
        self.refiner = CausalRefiner(value_dim, attention_window) if attention_window else None

    def config(self) -> dict[str, Any]:
        return super().config() | dict(response_embedding=self.response_embedding,
                                       attention_window=self.attention_window, ability_scale=self.ability_scale,
                                       anchored=self.anchored)

    def _summaries(self, read: torch.Tensor, weights: torch.Tensor,
                   key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The summary of (read, key), and with ``anchored`` the same for a learner with no history.

        theta is then ability(summary) - ability(anchor): 0 for a new learner on
        every item. Without the anchor the summary's item key (and the item's
        addressing of the memory) lets theta absorb item difficulty, and the
        betas stop meaning difficulty (bench/ordinal_recovery.py measures it).
        """
        summary = torch.tanh(self.summary(torch.cat([read, key], dim=-1)))
        if not self.anchored:
            return summary, None
        anchor = torch.tanh(self.summary(torch.cat([weights @ self.value0, key], dim=-1)))  # (..., N) @ (N, Dv)
        return summary, anchor

    def _head(self, read: torch.Tensor, weights: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        summary, anchor = self._summaries(read, weights, key)
        return self.head(self.drop(summary), key, None if anchor is None else self.drop(anchor))

    def _values(self, x: torch.Tensor, valid: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Raw interaction embeddings (B, T, Dv), ``valid`` a prefix -> values to write, and the refiner's new cache."""
        if self.refiner is None:
            return x, {}
        refined, cache, cache_valid = self.refiner(x, valid, state["cache"], state["cache_valid"])
        return refined, {"cache": cache, "cache_valid": cache_valid}

    def _applied_values(self, x: torch.Tensor, applied: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """``_values`` of the positions ``applied`` (B, T) alone, as serving writes them: the refiner
        reads a row's applied interactions only, never a prediction request between them."""
        if self.refiner is None:
            return x, {}
        order = applied_first(applied).unsqueeze(-1).expand_as(x)  # (B, T, Dv)
        prefix = torch.arange(x.shape[1], device=x.device) < applied.sum(1, keepdim=True)  # (B, T)
        refined, cache = self._values(x.gather(1, order), prefix, state)
        return torch.zeros_like(refined).scatter(1, order, refined), cache  # back to each row's positions

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State]:
        B = histories.shape[0]
        if state is None:  # value0 keeps its gradient, unlike init_state's detached copy
            state = self.init_state(B) | {"memory": self.value0.unsqueeze(0).expand(B, -1, -1)}
        key, weights = self._address(histories.items, histories.concepts)  # (B, T, Dk), (B, T, N)
        raw = self.interaction(histories.items, histories.concepts, histories.responses)  # (B, T, Dv)
        applied = histories.applied  # (B, T): a prediction request writes nothing, as in serving
        value, cache = self._applied_values(raw, applied, state)
        read, memory = self._memory_pass(state["memory"], weights, value, histories)
        return self._head(read, weights, key), {"memory": memory} | cache

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        state = super().init_state(batch_size)
        if self.refiner is not None:
            m = state["memory"]
            state["cache"] = m.new_zeros(batch_size, self.attention_window, self.value_dim)  # (B, W, Dv)
            state["cache_valid"] = m.new_zeros(batch_size, self.attention_window)  # (B, W), 1.0 = filled
        return state

    def update(self, state: State, interaction: Interactions) -> State:
        _, weights = self._address_of(interaction)
        raw = self._value_of(interaction)  # (B, Dv)
        valid = torch.ones(raw.shape[0], 1, dtype=torch.bool, device=raw.device)
        value, cache = self._values(raw.unsqueeze(1), valid, state)
        return {"memory": self._write(state["memory"], weights, value[:, 0])} | cache

    def predict(self, state: State, query: Interactions, describe: bool = False,
                max_values: int | None = None) -> torch.Tensor | Described:
        """With ``describe``, the head's parameters for this query (theta, alpha, betas / CORAL score,
        tau) and the expected score."""
        key, weights = self._address_of(query)
        read = self._read(weights, state["memory"])
        probs = self._head(read, weights, key).exp()
        if not describe:
            return probs
        summary, anchor = self._summaries(read, weights, key)
        undropped = self.head(summary, key, anchor).exp()  # (B, K)
        expected = (undropped * torch.arange(self.n_categories, dtype=probs.dtype, device=probs.device)).sum(-1)
        return probs, self.head.describe(summary, key, anchor) | {"expected_score": expected}


@register
class DeepGPCM(OrdinalDKVMN):
    name = "deep-gpcm"

    def _make_head(self) -> nn.Module:
        return GPCMHead(self.summary_dim, self.key_dim, self.n_categories, self.ability_scale)


@register
class DKVMNCoral(OrdinalDKVMN):
    name = "dkvmn-coral"
    tiny_config = OrdinalDKVMN.tiny_config | {"response_embedding": "learnable_decay"}

    def _make_head(self) -> nn.Module:
        return CoralHead(self.summary_dim, self.n_categories)


@register
class DeepGPCMBlend(OrdinalDKVMN):
    name = "deep-gpcm-blend"
    tiny_config = OrdinalDKVMN.tiny_config | {"attention_window": 3}

    def _make_head(self) -> nn.Module:
        return BlendHead(self.summary_dim, self.key_dim, self.n_categories, self.ability_scale)
