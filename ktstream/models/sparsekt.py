"""sparseKT (Huang, Liu, Zhao, Luo, Weng, SIGIR 2023, "Towards Robust Knowledge Tracing Models via
k-Sparse Attention"): simpleKT whose retriever reads only a few past interactions per query.

Small educational data sets let dense attention spread over many irrelevant interactions and
overfit; sparseKT keeps, per query and head, only the interactions with the largest attention:

- ``sparse="topk"``: the ``k`` largest weights among the keys the query may see, renormalised
  over them (a query that sees fewer than ``k`` keys keeps all of them);
- ``sparse="soft"`` (the paper's soft-thresholding): the keys in descending order of weight
  until their cumulative share of the visible mass reaches ``threshold``.

Selection is among VISIBLE keys only and is applied to the logits: unselected keys get -inf
before the one softmax (with the "no history" slot, which is always kept and not counted in
``k``), so a masked key can never be selected and has weight exactly 0. The published top-k took
the k-th largest of the already-softmaxed row (masked zeros included) as a threshold and
softmaxed the kept values again: in a row with fewer than k visible keys the zeros of masked
keys pass the threshold and get ``exp(0)/sum`` back (tests/leakage/leaky_sparsekt.py keeps that
version as a fixture the leakage gate fails). The selection depends only on the query's own
row, so the serving path (one query over the cached window) selects what training selects.

Position is the shared distance bias (ktstream.models.attention), as in simpleKT here. With the
time-decay relation on, its R term is mixed in after the selection and spreads ``1 - lambda``
of the mass over every visible key (still exactly 0 on masked keys).

>>> model = SparseKT(n_items=10, n_concepts=5, **SparseKT.tiny_config)
>>> model.config()["sparse"], model.config()["k"]
('topk', 3)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ktstream.models.attention import NEG_INF, WindowAttention, softmax_of_columns
from ktstream.models.families import register
from ktstream.models.simplekt import SimpleKT

SPARSE_MODES = ("topk", "soft")


def select_topk(logits: torch.Tensor, k: int) -> torch.Tensor:
    """``logits`` (..., S), -inf on keys the query may not see, with all but the ``k`` largest
    visible logits of each row set to -inf (rows with fewer visible keys keep every one)."""
    if logits.shape[-1] <= k:
        return logits
    idx = logits.detach().topk(k, -1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True) & torch.isfinite(logits)
    return logits.masked_fill(~keep, NEG_INF)


def select_mass(logits: torch.Tensor, threshold: float) -> torch.Tensor:
    """Soft-thresholding: keep each row's visible keys in descending order of weight while the
    weight of the keys before them is below ``threshold`` of the row's visible mass."""
    with torch.no_grad():
        visible = torch.isfinite(logits)
        p = torch.where(visible.any(-1, keepdim=True), F.softmax(logits.detach(), -1), 0.0)  # no key: NaN -> 0
        s, idx = p.sort(-1, descending=True)
        before = s.cumsum(-1) - s  # mass of the larger keys
        keep = torch.zeros_like(visible).scatter(-1, idx, before < threshold) & visible
    return logits.masked_fill(~keep, NEG_INF)


class SparseWindowAttention(WindowAttention):
    """``WindowAttention`` with a per-query selection of visible keys before its one softmax.

    Built by re-classing a constructed ``WindowAttention`` (same parameters, no new ones): the
    selection reads only the masked logits, in ``normalise``, before the one softmax.
    """

    sparse_mode: str = "topk"
    sparse_k: int = 5  # (``k`` is the key projection)
    sparse_threshold: float = 0.8

    def select(self, logits: torch.Tensor) -> torch.Tensor:
        if self.sparse_mode == "topk":
            return select_topk(logits, self.sparse_k)
        return select_mass(logits, self.sparse_threshold)

    def normalise(self, cols: list[torch.Tensor]) -> torch.Tensor:
        """Weights (B, H, Tq, 1 + S [+ 1]) from the null column, the masked key logits and the
        optional self column: the selection, then one softmax."""
        return softmax_of_columns([cols[0], self.select(cols[1]), *cols[2:]])


@register
class SparseKT(SimpleKT):
    name = "sparsekt"
    tiny_config = {"dim": 8, "heads": 2, "window": 8, "layers": 2, "ffn": 16, "k": 3}
    attention_class: type[SparseWindowAttention] = SparseWindowAttention

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, dim: int = 64, heads: int = 4,
                 window: int = 200, layers: int = 2, dropout: float = 0.1, ffn: int = 128,
                 time_decay: bool = False, relation_dim: int = 16, shared_heads: int = 0, routed_topk: int = 0,
                 cache_dtype: str = "float32", l2: float = 1e-5, position: str = "monotonic", sparse: str = "topk",
                 k: int = 5, threshold: float = 0.8):
        if sparse not in SPARSE_MODES:
            raise ValueError(f"sparse must be one of {SPARSE_MODES}, got {sparse!r}")
        if k < 1 or not 0.0 < threshold <= 1.0:
            raise ValueError(f"need k >= 1 and 0 < threshold <= 1, got {k}, {threshold}")
        super().__init__(n_items, n_concepts, n_categories, dim, heads, window, layers, dropout, ffn, time_decay,
                         relation_dim, shared_heads, routed_topk, cache_dtype, l2, position=position)
        self._config.update(sparse=sparse, k=k, threshold=threshold)
        for blk in self.retriever:  # the retriever's attentions select their keys; parameters unchanged
            blk.attn.__class__ = self.attention_class
            blk.attn.sparse_mode, blk.attn.sparse_k, blk.attn.sparse_threshold = sparse, k, threshold
