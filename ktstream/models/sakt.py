"""SAKT: Self-Attentive Knowledge Tracing (Pandey & Karypis, EDM 2019).

The query is the embedding of the item being attempted (item and concepts);
keys and values are embeddings of the learner's past interactions (item,
concepts and response). The attention is causal by construction: a prediction
reads the W interactions applied before its step and never the current
response. Position is a distance bias (see ``attention``) instead of SAKT's
absolute position embedding, so the per-learner cache of keys/values never
needs recomputation when the window slides; ``position`` picks the bias
(``attention.POSITIONS``: AKT's monotonic decay, learned relative buckets,
ALiBi, AKT's context-aware distance).

>>> import torch
>>> model = SAKT(n_items=10, n_concepts=5, **SAKT.tiny_config)
>>> state = model.init_state(2)
>>> sorted(k for k in state if k.startswith("retriever"))
['retriever_0_k', 'retriever_0_v']
"""

from __future__ import annotations

import torch

from ktstream.models.embeddings import InteractionEmbedding, QuestionEmbedding
from ktstream.models.families import register
from ktstream.models.windowed import WindowedKT


@register
class SAKT(WindowedKT):
    name = "sakt"
    tiny_config = {"dim": 8, "heads": 2, "window": 8, "layers": 1, "ffn": 16}
    key_source = value_source = "interaction"  # keys and values: past interactions

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, dim: int = 64, heads: int = 4,
                 window: int = 200, layers: int = 1, dropout: float = 0.2, ffn: int = 128,
                 time_decay: bool = False, relation_dim: int = 16, shared_heads: int = 0, routed_topk: int = 0,
                 cache_dtype: str = "float32", use_items: bool = True, position: str = "monotonic"):
        super().__init__(n_items, n_concepts, n_categories, dim, heads, window, layers, dropout, ffn, time_decay,
                         relation_dim, shared_heads, routed_topk, cache_dtype, encoder_layers={}, position=position)
        self._config.update(use_items=use_items, position=position)
        self.question = QuestionEmbedding(n_items, n_concepts, dim, use_items)
        self.interaction = InteractionEmbedding(n_items, n_concepts, n_categories, dim, use_items)

    def embed_question(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        return self.question(items, concepts)

    def embed_interaction(self, items, concepts, responses, question: torch.Tensor) -> torch.Tensor:
        return self.interaction(items, concepts, responses)
