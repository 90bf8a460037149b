"""AKT: Context-Aware Attentive Knowledge Tracing (Ghosh, Heffernan & Lan, KDD 2020).

- Rasch embeddings (``rasch``): an item is its concepts' embedding moved by a
  scalar difficulty, so unseen items are represented by their concepts.
- Question encoder: self-attention over the questions of past interactions
  (and, for a query, the query itself): contextual question representations.
- Knowledge encoder: self-attention over past interactions (question and response).
- Knowledge retriever: the query's contextual question attends to the past
  questions' representations (keys, same projection as the query) and reads
  the knowledge representations (values).
- Monotonic attention: every attention's logits decay with the distance to the
  key at a learned non-negative rate per head (``attention``). By default the
  plain distance, in interactions and in seconds; ``position="context"`` is
  AKT's context-aware distance, computed at query time from the query's own
  first-pass weights, so cached keys never need recomputation either way
  (other variants: ``attention.POSITIONS``).

Encoder representations of an interaction are computed once, when it is
appended, over its own window (``windowed``). Options: the time-decay relation
in the retriever, mixture-of-heads routing in every layer, fp16 caches.

>>> model = AKT(n_items=10, n_concepts=5, **AKT.tiny_config)
>>> model.receptive_field()  # the encoders reach one window further back
16
"""

from __future__ import annotations

import torch

from ktstream.models.rasch import RaschEmbedding
from ktstream.models.families import register
from ktstream.models.windowed import WindowedKT


@register
class AKT(WindowedKT):
    name = "akt"
    tiny_config = {"dim": 8, "heads": 2, "window": 8, "question_layers": 1, "knowledge_layers": 1, "ffn": 16}
    query_encoder = key_source = "question"  # keys: encoded past questions
    value_source = "interaction"  # values: encoded past interactions (the knowledge encoder)

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, dim: int = 64, heads: int = 4,
                 window: int = 200, question_layers: int = 1, knowledge_layers: int = 1, layers: int = 1,
                 dropout: float = 0.1, ffn: int = 128, time_decay: bool = False, relation_dim: int = 16,
                 shared_heads: int = 0, routed_topk: int = 0, cache_dtype: str = "float32", l2: float = 1e-5,
                 position: str = "monotonic"):
        super().__init__(n_items, n_concepts, n_categories, dim, heads, window, layers, dropout, ffn, time_decay,
                         relation_dim, shared_heads, routed_topk, cache_dtype, kq_same=True,
                         encoder_layers={"question": question_layers, "interaction": knowledge_layers},
                         position=position)
        self._config.update(question_layers=question_layers, knowledge_layers=knowledge_layers, l2=l2,
                            position=position)
        self.l2 = l2
        self.rasch = RaschEmbedding(n_items, n_concepts, n_categories, dim)

    def embed_question(self, items: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        return self.rasch.question(items, concepts)

    def embed_interaction(self, items, concepts, responses, question: torch.Tensor) -> torch.Tensor:
        return self.rasch.interaction(items, responses, question)

    def penalty(self) -> torch.Tensor:
        """Regularisation to add to the training loss (AKT: L2 on item difficulties)."""
        return self.l2 * self.rasch.penalty()
