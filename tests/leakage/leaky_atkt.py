"""ATKT as its authors wrote it (Guo et al., ACM MM 2021; xiaopengguo/ATKT, pyKT's ``atkt``), kept
as a fixture the leakage gate must fail. Never registered.

The original attention scores every LSTM hidden state of the sequence, normalises the scores
with one softmax over *all* positions (``Softmax(dim=1)`` over the whole sequence, the future
included) and reads, for each position, the cumulative sum of alpha_j h_j over the states
before it. The read sums the past only, so the weights it uses on later keys are zero, but the
normaliser holds every later hidden state: a prediction moves when a later response (or the
response at t itself, which the next state carries) changes. ``OriginalATKT`` is the registered
causal family (ktstream.models.atkt) with that one change, in the training path; its serving
path is the family's, so the two paths also disagree.
"""

from __future__ import annotations

import torch

from ktstream.models.atkt import ATKT, visible_softmax


class OriginalATKT(ATKT):
    name = "leaky-atkt"
    query_block = 1 << 30  # one block: the normaliser sees every key of the chunk

    def _weights(self, scores: torch.Tensor, visible: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        everything = valid.unsqueeze(1).expand_as(visible)  # THE BUG: every key of the chunk, later ones too
        return visible_softmax(scores, everything) * visible  # the read still sums the visible (past) keys
