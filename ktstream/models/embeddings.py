"""Embeddings of questions (item + concepts) and of interactions (question + response).

An interaction may carry several concepts; their embeddings are averaged over
the non-padding entries. ``use_items`` adds a per-item table (off for models
that should generalise across items through their concepts).
"""

from __future__ import annotations

import torch
from torch import nn


def mean_over_concepts(table: nn.Embedding, concepts: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
    """(..., C) concept ids, 0 = padding -> (..., D) mean embedding of rows ``ids`` (default: the
    concept ids themselves) over the present concepts (zeros when none)."""
    emb = table(concepts if ids is None else ids)  # (..., C, D)
    present = (concepts > 0).unsqueeze(-1).to(emb.dtype)
    if concepts.shape[-1] == 1:  # one concept slot (the common case): the same numbers, in fewer operations
        return emb.squeeze(-2) * present.squeeze(-2)
    return (emb * present).sum(-2) / present.sum(-2).clamp(min=1.0)


class QuestionEmbedding(nn.Module):
    def __init__(self, n_items: int, n_concepts: int, dim: int, use_items: bool = True):
        super().__init__()
        self.use_items = use_items
        self.concept = nn.Embedding(n_concepts, dim, padding_idx=0)
        self.item = nn.Embedding(n_items, dim, padding_idx=0) if use_items else None

    def forward(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        out = mean_over_concepts(self.concept, concepts)
        if self.item is not None:
            out = out + self.item(items)
        return out


class InteractionEmbedding(nn.Module):
    """Joint (question, response) embedding, as DKT's one-hot of (skill, correct)."""

    def __init__(self, n_items: int, n_concepts: int, n_categories: int, dim: int, use_items: bool = True):
        super().__init__()
        self.K = n_categories
        self.use_items = use_items
        self.concept = nn.Embedding(n_concepts * n_categories, dim)
        self.item = nn.Embedding(n_items * n_categories, dim) if use_items else None

    def forward(self, items: torch.Tensor, concepts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        r = responses.clamp(min=0)  # padded / absent responses are masked out by the caller
        out = mean_over_concepts(self.concept, concepts, concepts * self.K + r.unsqueeze(-1))
        if self.item is not None:
            out = out + self.item(items * self.K + r)
        return out
