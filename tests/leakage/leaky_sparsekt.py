"""sparseKT with the published top-k (pyKT ``sparsekt.py``), kept as a fixture the leakage gate
must fail. Never registered.

The published selection runs on a row that was already softmaxed (masked keys at exactly 0):
the k-th largest weight is the threshold, weights at or above it are kept and softmaxed again.
Where a row sees fewer than k keys the threshold is 0, the masked keys' zeros pass it, and the
second softmax gives each of them ``exp(0)/sum``: future interactions are read. (pyKT left each
sequence's first k rows unselected, where without steps a row sees fewer than k keys; rows with
fewer visible keys further on, from steps, a window or a carried state, still leak. This fixture
applies the selection to every row.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ktstream.models.attention import softmax_of_columns
from ktstream.models.sparsekt import SparseKT, SparseWindowAttention


class PublishedTopKAttention(SparseWindowAttention):
    def normalise(self, cols: list[torch.Tensor]) -> torch.Tensor:
        w = softmax_of_columns(cols)  # masked keys: exactly 0
        if w.shape[-1] <= self.sparse_k:
            return w
        kth = w.topk(self.sparse_k, -1).values[..., -1:]
        return F.softmax(w.masked_fill(w < kth, -1e32), -1)  # THE BUG: zeros >= a threshold of 0, softmaxed again


class LeakySparseKT(SparseKT):
    name = "leaky-sparsekt-topk"
    attention_class = PublishedTopKAttention
