"""simpleKT (Liu et al., ICLR 2023): a strong, simple baseline of the AKT family.

Rasch embeddings (``rasch``) and a single knowledge retriever: the query is the
item's question embedding, keys are past questions (same projection as the
query), values are past interactions. No question or knowledge encoder.
Stacked retriever layers refine the query; their keys and values all come from
the raw embeddings of the past interactions (simpleKT's later layers use the
previous layer's outputs as keys; for one layer the two agree), so every
layer's cache holds projections computed once per interaction. Position is the
shared distance bias (``attention``), which replaces simpleKT's absolute
position embedding (option ``position``: ``attention.POSITIONS``); options as for AKT.

>>> model = SimpleKT(n_items=10, n_concepts=5, **SimpleKT.tiny_config)
>>> model.receptive_field()
8
"""

from __future__ import annotations

import torch

from ktstream.models.rasch import RaschEmbedding
from ktstream.models.families import register
from ktstream.models.windowed import WindowedKT


@register
class SimpleKT(WindowedKT):
    name = "simplekt"
    tiny_config = {"dim": 8, "heads": 2, "window": 8, "layers": 2, "ffn": 16}
    key_source, value_source = "question", "interaction"

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, dim: int = 64, heads: int = 4,
                 window: int = 200, layers: int = 2, dropout: float = 0.1, ffn: int = 128,
                 time_decay: bool = False, relation_dim: int = 16, shared_heads: int = 0, routed_topk: int = 0,
                 cache_dtype: str = "float32", l2: float = 1e-5, position: str = "monotonic"):
        super().__init__(n_items, n_concepts, n_categories, dim, heads, window, layers, dropout, ffn, time_decay,
                         relation_dim, shared_heads, routed_topk, cache_dtype, kq_same=True, encoder_layers={},
                         position=position)
        self._config.update(l2=l2, position=position)
        self.l2 = l2
        self.rasch = RaschEmbedding(n_items, n_concepts, n_categories, dim)

    def embed_question(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        return self.rasch.question(items, concepts)

    def embed_interaction(self, items, concepts, responses, question: torch.Tensor) -> torch.Tensor:
        return self.rasch.interaction(items, responses, question)

    def penalty(self) -> torch.Tensor:
        """Regularisation to add to the training loss (L2 on item difficulties, as AKT)."""
        return self.l2 * self.rasch.penalty()
