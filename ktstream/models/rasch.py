"""Rasch-model embeddings of AKT (Ghosh et al., KDD 2020), used by AKT and simpleKT.

An item is its concepts' embedding moved along the concepts' variation vector
by a scalar item difficulty:

    question    x_q = c_c + mu_q d_c
    interaction y   = x_q + e_r + mu_q f_r

(c, d per concept, averaged over an item's concepts; e, f per response
category r; mu_q one scalar per item). Items share everything but mu, so an
item first seen after training (vocabulary index 1, "unknown") or the padding
index keeps mu = 0 and is represented by its concepts alone; an item without
concepts falls back to the unknown-concept row.

>>> emb = RaschEmbedding(n_items=5, n_concepts=4, n_categories=2, dim=3)
>>> items, concepts = torch.tensor([[1, 3]]), torch.tensor([[[2, 0], [2, 0]]])
>>> q = emb.question(items, concepts)
>>> torch.allclose(q[0, 0], emb.concept.weight[2])  # unknown item: its concept only
True
"""

from __future__ import annotations

import torch
from torch import nn

from ktstream.data.vocab import UNKNOWN
from ktstream.models.embeddings import mean_over_concepts


def _concepts_or_unknown(concepts: torch.Tensor) -> torch.Tensor:
    """(..., C) ids; rows with no concept get the unknown concept in column 0."""
    none = ~(concepts > 0).any(-1, keepdim=True)
    first = torch.where(none, torch.full_like(concepts[..., :1], UNKNOWN), concepts[..., :1])
    return torch.cat([first, concepts[..., 1:]], -1)


class RaschEmbedding(nn.Module):
    def __init__(self, n_items: int, n_concepts: int, n_categories: int, dim: int):
        super().__init__()
        self.concept = nn.Embedding(n_concepts, dim)  # c
        self.variation = nn.Embedding(n_concepts, dim)  # d
        self.difficulty = nn.Embedding(n_items, 1)  # mu; starts at 0 as in AKT
        nn.init.zeros_(self.difficulty.weight)
        self.response = nn.Embedding(n_categories, dim)  # e
        self.response_variation = nn.Embedding(n_categories, dim)  # f

    def mu(self, items: torch.Tensor) -> torch.Tensor:
        """(...,) item ids -> (..., 1) difficulty; 0 for padding and unknown items."""
        return self.difficulty(items) * (items > UNKNOWN).unsqueeze(-1).to(self.difficulty.weight.dtype)

    def question(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        concepts = _concepts_or_unknown(concepts)
        c = mean_over_concepts(self.concept, concepts)  # (..., D)
        return c + self.mu(items) * mean_over_concepts(self.variation, concepts)

    def interaction(self, items: torch.Tensor, responses: torch.Tensor, question: torch.Tensor) -> torch.Tensor:
        r = responses.clamp(min=0)  # absent responses are never appended
        return question + self.response(r) + self.mu(items) * self.response_variation(r)

    def penalty(self) -> torch.Tensor:
        """AKT's L2 term on the item difficulties (add ``l2 * penalty()`` to the loss)."""
        return (self.difficulty.weight ** 2).sum()
