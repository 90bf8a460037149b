"""Perturbed copies of a batch: what a learner did at and after a position, changed or removed.

Every row b gets its own position ``t[b]``; ``s[b] = step_start[b, t[b]]`` is
where t's step begins. The prediction at t may read interactions before s and
t's query part (item, concepts, time) only, so:

- `change_future`: responses from s on, query parts from ``query_from`` on
  (t + 1: t's own query kept; t: t's query changed too) take other values;
- `cut_after`: positions after t become padding (the history ends at t).

Items and concepts are replaced by other valid ids (never 0 = padding, never
the id they had), responses by another category, and times move later by a
random positive amount that keeps each history in time order.
"""

from __future__ import annotations

import numpy as np
import torch

from ktstream.data.histories import NO_RESPONSE, Histories


def positions_at_or_after(start: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T) mask of positions >= start[b]."""
    return torch.arange(T).unsqueeze(0) >= start.unsqueeze(1)


def _other_ids(ids: torch.Tensor, n: int, rng: np.random.Generator) -> torch.Tensor:
    """Another id in 2..n-1 (valid, not padding or unknown), different from the one given when possible."""
    span = n - 2
    if span <= 1:
        return torch.full_like(ids, 2)
    shift = torch.from_numpy(rng.integers(1, span, size=tuple(ids.shape)))
    return (ids.clamp(min=2) - 2 + shift) % span + 2


def change_future(hist: Histories, t: torch.Tensor, query_from: torch.Tensor, n_categories: int,
                  n_items: int, n_concepts: int, rng: np.random.Generator) -> Histories:
    """Responses changed from ``step_start[b, t[b]]`` on, items/concepts/times from ``query_from[b]`` on."""
    B, T = hist.shape
    s = hist.step_start.gather(1, t.unsqueeze(1)).squeeze(1)  # (B,)
    resp_zone = positions_at_or_after(s, T) & hist.mask & (hist.responses >= 0)
    query_zone = positions_at_or_after(query_from, T) & hist.mask
    shift = torch.from_numpy(rng.integers(1, n_categories, size=(B, T)))
    responses = torch.where(resp_zone, (hist.responses + shift) % n_categories, hist.responses)
    items = torch.where(query_zone, _other_ids(hist.items, n_items, rng), hist.items)
    conc_zone = query_zone.unsqueeze(-1) & (hist.concepts > 0)
    concepts = torch.where(conc_zone, _other_ids(hist.concepts, n_concepts, rng), hist.concepts)
    gaps = torch.from_numpy(rng.exponential(900.0, size=(B, T))) * query_zone
    times = hist.times + gaps.cumsum(1)  # NaN (no clock) stays NaN
    return hist.replace(responses=responses, items=items, concepts=concepts, times=times)


def cut_after(hist: Histories, t: torch.Tensor) -> Histories:
    """Positions after t[b] become padding, as if the history ended at t."""
    B, T = hist.shape
    gone = positions_at_or_after(t + 1, T)
    return hist.replace(items=hist.items.masked_fill(gone, 0),
                        concepts=hist.concepts.masked_fill(gone.unsqueeze(-1), 0),
                        responses=hist.responses.masked_fill(gone, NO_RESPONSE),
                        times=hist.times.masked_fill(gone, float("nan")),
                        step_start=torch.where(gone, torch.arange(T).expand(B, T), hist.step_start),
                        mask=hist.mask & ~gone)


def flip_at(hist: Histories, t: torch.Tensor, n_categories: int, rng: np.random.Generator) -> Histories:
    """Only the response at t[b] changed (to another category)."""
    B, T = hist.shape
    at = (torch.arange(T).unsqueeze(0) == t.unsqueeze(1)) & hist.mask & (hist.responses >= 0)
    shift = torch.from_numpy(rng.integers(1, n_categories, size=(B, T)))
    return hist.replace(responses=torch.where(at, (hist.responses + shift) % n_categories, hist.responses))


def pick_positions(lengths: torch.Tensor, round_: int, rng: np.random.Generator) -> torch.Tensor:
    """Per-row position for one round: round 0 the first, round 1 the last, later rounds random."""
    if round_ == 0:
        return torch.zeros_like(lengths)
    if round_ == 1:
        return lengths - 1
    return torch.from_numpy(rng.integers(0, lengths.numpy()))
