"""CL4KT: contrastive learning for knowledge tracing (Lee, Choi, Lee, Jeon, Park & Park, WWW 2022).

Why: a learner's augmented histories should read as the same learner, and the same history with its
responses flipped as a different one; pulling the encoder's sequence representations of two augmented
views together (InfoNCE over the batch, the flipped view as a hard negative) regularises the encoder
where histories are short and sparse.

Model: simpleKT (``simplekt``; every option of it applies); prediction and serving are simpleKT's, the
augmentations are training-only. ``training_loss`` = the trainer's NLL + ``cl_weight`` x InfoNCE
(temperature ``temperature``) between two views of a span of each learner's history. A view's
representation is the mean over its slots of the retriever's output (the encoder the predictions read),
computed over the view alone.

Augmentations (CL4KT's four, on a span of at most ``cl_span`` applied interactions; probabilities as
named): crop (keep a contiguous run of a ``1 - crop_prob`` share), permute (shuffle a contiguous run of a
``permute_prob`` share; the slots keep their clock times, so times stay ordered), question masking (the
item becomes the vocabulary's unknown id and its concepts none), question replacement (the question of
another interaction of the span; CL4KT draws an easier or harder skill). Hard negative: the span with
every response reversed (K - 1 - r).

Causal boundary: the NLL term is the trainer's, on the batch as given: each target's prediction reads
what precedes its step only, and no augmented interaction ever enters a prediction. The contrastive term
scores no target: it reads one span [first, stop) of a learner's training history, and every slot of a
view (question, response, time) is drawn from that span alone, never from after ``stop`` nor from another
learner (``views`` returns each slot's sources; tests/models/test_cl4kt.py checks them and that changing
anything at or after ``stop`` changes no view).

>>> model = CL4KT(n_items=10, n_concepts=5, **CL4KT.tiny_config)
>>> model.state_kind, model.config()["cl_weight"]
('windowed', 0.1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ktstream.data.histories import Histories, NO_RESPONSE
from ktstream.data.vocab import PAD, UNKNOWN
from ktstream.models.families import register
from ktstream.models.simplekt import SimpleKT


@dataclass
class Views:
    """Augmented views (B, S) of one span per learner, and where every slot came from: ``questions``,
    ``responses`` and ``times`` (B, S) hold the batch position whose item and concepts, response and
    time the slot carries (-1: an empty slot, or a masked question)."""

    histories: Histories
    questions: torch.Tensor
    responses: torch.Tensor
    times: torch.Tensor


def spans(batch: Histories, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, L) batch positions of a random run of at most ``length`` consecutive applied interactions
    per learner, left-aligned (-1 pads)."""
    applied = batch.applied
    n = applied.sum(1)  # (B,)
    L = n.clamp(max=length)
    start = (torch.rand(n.shape, generator=generator, device=n.device) * (n - L + 1)).long()
    start = start.clamp(max=(n - L).clamp(min=0))
    rank = applied.long().cumsum(1) - 1  # (B, T) index of each applied position among the row's
    col = rank - start.unsqueeze(1)
    inside = applied & (col >= 0) & (col < L.unsqueeze(1))
    out = torch.full((batch.shape[0], max(int(L.max()), 1)), -1, dtype=torch.long, device=n.device)
    rows, pos = inside.nonzero(as_tuple=True)
    out[rows, col[rows, pos]] = pos
    return out


def _runs(n: torch.Tensor, share: float, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the start and length of a random run of ``floor(share * n)`` of ``n`` slots."""
    size = torch.floor(share * n.double()).long()
    start = (torch.rand(n.shape, generator=generator, device=n.device) * (n - size + 1)).long()
    start = start.clamp(max=(n - size).clamp(min=0))
    return start, size


def augment(src: torch.Tensor, crop_prob: float, permute_prob: float, generator=None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Crop then permute the run ``src`` (B, L) of positions (-1 pads). Returns the cropped run (the
    slots' times) and the permuted one (their interactions), both left-aligned (B, L)."""
    B, L = src.shape
    slots = torch.arange(L, device=src.device).expand(B, L)
    n = (src >= 0).sum(1)
    keep = torch.ceil((1.0 - crop_prob) * n.double()).long().clamp(min=1).minimum(n)
    offset = (torch.rand(B, generator=generator, device=src.device) * (n - keep + 1)).long()
    offset = offset.clamp(max=(n - keep).clamp(min=0))
    taken = src.gather(1, (offset.unsqueeze(1) + slots).clamp(max=L - 1))
    cropped = torch.where(slots < keep.unsqueeze(1), taken, -1)
    start, size = _runs(keep, permute_prob, generator)
    inside = (slots >= start.unsqueeze(1)) & (slots < (start + size).unsqueeze(1))
    shuffled = start.unsqueeze(1) + torch.rand(B, L, generator=generator, device=src.device) * size.unsqueeze(1)
    key = torch.where(inside, shuffled, slots.double())  # outside the run a slot keeps its place
    return cropped, cropped.gather(1, key.argsort(1))


def views(batch: Histories, src: torch.Tensor, crop_prob: float, permute_prob: float, mask_prob: float,
          replace_prob: float, generator: torch.Generator | None = None) -> Views:
    """One augmented view of each learner's run ``src`` (B, L) of batch positions (see the module docstring)."""
    B, L = src.shape
    times_src, inter_src = augment(src, crop_prob, permute_prob, generator)
    valid = inter_src >= 0
    n = valid.sum(1)
    draw = torch.rand(B, L, generator=generator, device=src.device)
    masked = valid & (draw < mask_prob)
    replaced = valid & ~masked & (draw < mask_prob + replace_prob)
    other = (torch.rand(B, L, generator=generator, device=src.device) * n.unsqueeze(1)).long()
    other = other.clamp(max=(n - 1).clamp(min=0).unsqueeze(1))  # another slot of the view: a question of the span
    q_src = torch.where(replaced, inter_src.gather(1, other), inter_src)
    q_src = torch.where(masked, -1, q_src)

    def take(x: torch.Tensor, at: torch.Tensor, fill) -> torch.Tensor:  # x (B, T, ...) at positions (B, L)
        idx = at.clamp(min=0)
        got = x.gather(1, idx.view(B, L, *[1] * (x.dim() - 2)).expand(B, L, *x.shape[2:]))
        return torch.where((at >= 0).view(B, L, *[1] * (x.dim() - 2)), got, torch.as_tensor(fill, dtype=x.dtype))

    items = torch.where(masked, UNKNOWN, take(batch.items, q_src, PAD))
    steps = torch.arange(L, device=src.device).expand(B, L).clone()  # every slot a step of its own
    hist = Histories(items, take(batch.concepts, q_src, 0), take(batch.responses, inter_src, NO_RESPONSE),
                     take(batch.times, times_src, math.nan), steps, valid)
    return Views(hist, q_src, inter_src, times_src)


def reversed_responses(hist: Histories, n_categories: int) -> Histories:
    """The same history with every response r turned into K - 1 - r (the hard negative)."""
    r = hist.responses
    return hist.replace(responses=torch.where(r >= 0, n_categories - 1 - r, r))


def info_nce(a: torch.Tensor, b: torch.Tensor, negatives: torch.Tensor | None, temperature: float) -> torch.Tensor:
    """Symmetric InfoNCE of rows of ``a`` and ``b`` (N, D): row i of each is the other's positive, every
    other row of the other (and every row of ``negatives``) a negative; cosine similarity / temperature."""
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    target = torch.arange(a.shape[0], device=a.device)
    loss = 0.0
    for x, y in ((a, b), (b, a)):
        logits = x @ y.T
        if negatives is not None:
            logits = torch.cat([logits, x @ F.normalize(negatives, dim=-1).T], 1)
        loss = loss + F.cross_entropy(logits / temperature, target)
    return loss / 2


@register
class CL4KT(SimpleKT):
    name = "cl4kt"
    tiny_config = {**SimpleKT.tiny_config, "cl_span": 12}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2, cl_weight: float = 0.1,
                 temperature: float = 0.05, mask_prob: float = 0.2, crop_prob: float = 0.3,
                 permute_prob: float = 0.3, replace_prob: float = 0.3, hard_negatives: bool = True,
                 cl_span: int = 100, **simplekt: Any):
        super().__init__(n_items, n_concepts, n_categories, **simplekt)
        for name, p in (("mask_prob", mask_prob), ("crop_prob", crop_prob), ("permute_prob", permute_prob),
                        ("replace_prob", replace_prob)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {p}")
        if mask_prob + replace_prob >= 1.0:
            raise ValueError(f"mask_prob + replace_prob must be < 1, got {mask_prob + replace_prob}")
        if temperature <= 0 or cl_weight < 0 or cl_span < 2:
            raise ValueError(f"need temperature > 0, cl_weight >= 0, cl_span >= 2; got {temperature}, {cl_weight}, "
                             f"{cl_span}")
        self.cl = dict(cl_weight=cl_weight, temperature=temperature, mask_prob=mask_prob, crop_prob=crop_prob,
                       permute_prob=permute_prob, replace_prob=replace_prob, hard_negatives=hard_negatives,
                       cl_span=cl_span)
        self._config.update(self.cl)

    def represent(self, hist: Histories) -> torch.Tensor:
        """(B, D) the mean over each row's positions of the retriever's output, the history read alone."""
        B, T = hist.shape
        applied = hist.applied.long()
        before = applied.cumsum(1) - applied
        q = self.embed_question(hist.items, hist.concepts)
        y = self.embed_interaction(hist.items, hist.concepts, hist.responses, q)
        ks = self._append(None, q, y, before, applied.bool(), hist.times)
        x, _ = self._retrieve(ks, q, before.gather(1, hist.step_start), hist.times, T)  # (B, T, D)
        m = hist.mask.unsqueeze(-1).to(x.dtype)
        return (x * m).sum(1) / m.sum(1).clamp(min=1.0)

    def contrastive_loss(self, batch: Histories, src: torch.Tensor | None = None,
                         generator: torch.Generator | None = None) -> torch.Tensor:
        """InfoNCE between two views of each learner's run ``src`` (default: a random span of ``cl_span``);
        learners with fewer than two interactions there are left out (0 when fewer than two remain)."""
        c = self.cl
        src = spans(batch, c["cl_span"], generator) if src is None else src
        rows = ((src >= 0).sum(1) >= 2).nonzero().squeeze(1)
        if len(rows) < 2:
            return torch.zeros((), device=batch.items.device)
        batch, src = batch.select(rows), src[rows]
        made = [views(batch, src, c["crop_prob"], c["permute_prob"], c["mask_prob"], c["replace_prob"], generator)
                for _ in range(2)]
        a, b = (self.represent(v.histories) for v in made)
        negatives = None
        if c["hard_negatives"]:
            whole = views(batch, src, 0.0, 0.0, 0.0, 0.0, generator).histories  # the run as it is
            negatives = self.represent(reversed_responses(whole, self.n_categories))
        return info_nce(a, b, negatives, c["temperature"])

    def training_loss(self, batch: Histories, base_loss: Callable[[Histories], tuple[torch.Tensor, int]]
                      ) -> tuple[torch.Tensor, int]:
        """The trainer's NLL + ``cl_weight`` x InfoNCE, as a mean over the ``count`` scored positions."""
        nll, count = base_loss(batch)
        if count == 0 or self.cl["cl_weight"] == 0:
            return nll, count
        return nll + self.cl["cl_weight"] * count * self.contrastive_loss(batch), count
