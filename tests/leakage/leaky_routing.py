"""A leaky mixture-of-heads router for the routing gate tests (tests/leakage/test_gate_routing.py).

`PooledHeadRouter` is `HeadRouter` fed the mean of the question embeddings over the whole
sequence instead of the position's own (the pooled-routing bug of RouterKT-style designs:
every position's head gates read the items that come after it). No responses are pooled, so
only the routing itself leaks. In the serving path a query's sequence is the query alone, so
serving also differs from training.
"""

from __future__ import annotations

import torch

from ktstream.models import create, family
from ktstream.models.attention import HeadRouter
from ktstream.models.windowed import WindowedKT

MOH = {"heads": 4, "shared_heads": 1, "routed_topk": 2}  # the mixture-of-heads variant of the tests


class PooledHeadRouter(HeadRouter):
    def forward(self, question: torch.Tensor) -> torch.Tensor:
        return super().forward(question.mean(1, keepdim=True).expand_as(question))  # THE BUG: pooled over T


def pooled_router_model(name: str, n_items: int, n_concepts: int, **options) -> WindowedKT:
    """The family's MoH variant at its tiny config, every router replaced by a pooled one (same weights)."""
    model = create(name, n_items=n_items, n_concepts=n_concepts, **{**family(name).tiny_config, **MOH, **options})
    for module in list(model.modules()):
        router = getattr(module, "router", None)
        if isinstance(router, HeadRouter):
            leaky = PooledHeadRouter(router.proj.in_features, router.shared + router.proj.out_features,
                                     router.shared, router.topk)
            leaky.load_state_dict(router.state_dict())
            module.router = leaky
    return model
