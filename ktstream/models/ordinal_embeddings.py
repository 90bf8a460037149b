"""Interaction embeddings that know responses are ordered (Deep-GPCM's embedding strategies).

A response r in 0..K-1 becomes a weight vector w(r) over the K categories, and
the interaction embedding is sum_k w_k(r) * E_k(question), with one table row
per (question, category) as in `ktstream.models.embeddings.InteractionEmbedding`.
One-hot weights give exactly that embedding; the decaying weights let a 2 out
of 3 share most of its embedding with a 3, so rare categories borrow strength
from their neighbours. Letters: B learners, T positions, C concepts, K
categories, D width, W attention window.

>>> response_weights(torch.tensor([0, 2]), 3, "linear_decay").tolist()
[[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]]
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

RESPONSE_EMBEDDINGS = ("one_hot", "linear_decay", "learnable_decay")


def response_weights(responses: torch.Tensor, K: int, mode: str, rates: torch.Tensor | None = None) -> torch.Tensor:
    """(...) responses -> (...) x K weights; negative (absent) responses count as 0.

    linear_decay is the triangular max(0, 1 - |k - r| / (K-1)); learnable_decay is
    exp(-sum of positive rates up to the distance), so weights fall monotonically
    with distance by construction whatever the learned rates.
    """
    assert mode in RESPONSE_EMBEDDINGS, f"mode must be one of {RESPONSE_EMBEDDINGS}, got {mode!r}"
    dist = (torch.arange(K, device=responses.device) - responses.clamp(min=0).unsqueeze(-1)).abs()  # (..., K)
    if mode == "one_hot":
        return (dist == 0).float()
    if mode == "linear_decay":
        return (1.0 - dist.float() / (K - 1)).clamp(min=0.0)
    assert rates is not None and rates.shape == (K - 1,), "learnable_decay needs K-1 rates"
    decay = torch.cat([rates.new_zeros(1), F.softplus(rates).cumsum(0)])  # (K,): 0 at distance 0
    return torch.exp(-decay[dist])


class OrdinalInteractionEmbedding(nn.Module):
    """(item, concepts, response) -> (..., D), a drop-in for InteractionEmbedding."""

    def __init__(self, n_items: int, n_concepts: int, n_categories: int, dim: int, use_items: bool = True,
                 mode: str = "linear_decay"):
        super().__init__()
        if mode not in RESPONSE_EMBEDDINGS:
            raise ValueError(f"response_embedding must be one of {RESPONSE_EMBEDDINGS}, got {mode!r}")
        self.K, self.mode = n_categories, mode
        self.concept = nn.Parameter(torch.randn(n_concepts * n_categories, dim))
        self.item = nn.Parameter(torch.randn(n_items * n_categories, dim)) if use_items else None
        # learnable_decay starts at exp(-distance): softplus(0.5413) = 1.
        self.rates = nn.Parameter(torch.full((n_categories - 1,), 0.5413)) if mode == "learnable_decay" else None

    def _bag(self, table: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Weighted sum over the K category rows of each id: ids (M,), w (M, K) -> (M, D)."""
        rows = ids.unsqueeze(-1) * self.K + torch.arange(self.K, device=ids.device)  # (M, K)
        return F.embedding_bag(rows, table, per_sample_weights=w, mode="sum")

    def forward(self, items: torch.Tensor, concepts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        lead = items.shape  # (...), concepts (..., C)
        C = concepts.shape[-1]
        w = response_weights(responses, self.K, self.mode, self.rates).to(self.concept.dtype)  # (..., K)
        wc = w.unsqueeze(-2).expand(*lead, C, self.K).reshape(-1, self.K)  # (M*C, K)
        emb = self._bag(self.concept, concepts.reshape(-1), wc).view(*lead, C, -1)  # (..., C, D)
        present = (concepts > 0).unsqueeze(-1).to(emb.dtype)
        out = (emb * present).sum(-2) / present.sum(-2).clamp(min=1.0)
        if self.item is not None:
            out = out + self._bag(self.item, items.reshape(-1), w.reshape(-1, self.K)).view(*lead, -1)
        return out


class CausalRefiner(nn.Module):
    """Optional refinement: each interaction embedding attends over itself and the W before it.

    Residual single-head attention over a sliding window. The W most recent
    embeddings are carried in the serving state (``cache`` (B, W, D) and
    ``cache_valid`` (B, W), 1.0 where filled), so the serving path sees exactly
    the window the batched path sees. Only the *written* value is refined, never
    a prediction's input, so a prediction still uses nothing at or after its step.
    """

    def __init__(self, dim: int, window: int):
        super().__init__()
        assert window >= 1, f"attention window must be >= 1, got {window}"
        self.window = window
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, cache: torch.Tensor,
                cache_valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, D), valid (B, T) a prefix mask -> refined (B, T, D), new cache, new cache_valid."""
        B, T, D = x.shape
        W = self.window
        assert bool((valid[:, 1:] <= valid[:, :-1]).all()), "valid positions must be a prefix (right padding)"
        seq = torch.cat([cache, x], dim=1)  # (B, W+T, D)
        seq_valid = torch.cat([cache_valid > 0.5, valid], dim=1)  # (B, W+T)
        q, _, _ = self.qkv(x).chunk(3, dim=-1)  # (B, T, D)
        _, k, v = self.qkv(seq).chunk(3, dim=-1)  # (B, W+T, D)
        offset = torch.arange(W + T, device=x.device).view(1, -1) - torch.arange(T, device=x.device).view(-1, 1)
        band = (offset >= 0) & (offset <= W)  # (T, W+T): key j is query t's own row or one of the W before
        allowed = band.unsqueeze(0) & seq_valid.unsqueeze(1)
        allowed = allowed | (offset == W).unsqueeze(0)  # always itself: no empty rows on padding
        scores = (q @ k.transpose(1, 2)) / math.sqrt(D)  # (B, T, W+T)
        attn = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        refined = x + self.out(attn @ v)
        lengths = valid.sum(1)  # (B,)
        idx = lengths.view(B, 1) + torch.arange(W, device=x.device).view(1, W)  # (B, W): last W rows of seq
        new_cache = seq.gather(1, idx.unsqueeze(-1).expand(B, W, D))
        new_valid = seq_valid.gather(1, idx).to(cache_valid.dtype)
        return refined, new_cache, new_valid
