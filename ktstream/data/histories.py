"""Learner histories as tensors: the one data layout both model paths consume.

Letters: B learners, T positions, C concepts per interaction (0-padded).

`Histories` (B, T) feeds the training path; `Interactions` (B,) is one
position of each learner and feeds the serving path (`predict` reads its
query part: item, concepts, time; `update` also reads the response).
`step_start[b, t]` is the first position of t's step: the prediction for t may
use interactions at positions < step_start[b, t] only (invariant 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ktstream.core import step_key
from ktstream.data.vocab import PAD, Vocabulary
from ktstream.exceptions import LeakageError

NO_RESPONSE = -1


@dataclass
class Interactions:
    """One interaction (or query) per learner; shapes (B,) and concepts (B, C)."""

    items: torch.Tensor
    concepts: torch.Tensor
    responses: torch.Tensor
    times: torch.Tensor  # float64 seconds since epoch; NaN when the source has no clock

    def to(self, device) -> "Interactions":
        return Interactions(**{f.name: getattr(self, f.name).to(device) for f in fields(Interactions)})  # derived: dropped

    def __len__(self) -> int:
        return self.items.shape[0]

    def take(self, index: slice | torch.Tensor) -> "Interactions":
        """Rows ``index``: a slice (views) or a tensor of row numbers."""
        return Interactions(self.items[index], self.concepts[index], self.responses[index], self.times[index])

    @staticmethod
    def cat(parts: Sequence["Interactions"]) -> "Interactions":
        width = max(p.concepts.shape[1] for p in parts)
        conc = [torch.nn.functional.pad(p.concepts, (0, width - p.concepts.shape[1])) for p in parts]
        return Interactions(torch.cat([p.items for p in parts]), torch.cat(conc),
                            torch.cat([p.responses for p in parts]), torch.cat([p.times for p in parts]))


@dataclass
class Prepared(Interactions):
    """Interactions with tensors a model derived from them alone, once for a whole micro-batch
    (``KTModel.prepare``: embeddings, addressing); row i of each belongs to interaction i, and
    ``take`` keeps them aligned."""

    derived: dict[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def of(cls, x: Interactions, derived: dict[str, torch.Tensor]) -> "Prepared":
        """``x`` with ``derived`` (row i of each tensor computed from interaction i)."""
        return cls(x.items, x.concepts, x.responses, x.times, derived)

    def take(self, index: slice | torch.Tensor) -> "Prepared":
        return Prepared.of(super().take(index), {name: v[index] for name, v in self.derived.items()})


def derived(x: Interactions, name: str) -> torch.Tensor | None:
    """The tensor ``name`` a model prepared for these interactions, if it did."""
    return x.derived.get(name) if isinstance(x, Prepared) else None


@dataclass
class Histories:
    """Padded histories of B learners: items/responses/step_start (B, T), concepts (B, T, C)."""

    items: torch.Tensor
    concepts: torch.Tensor
    responses: torch.Tensor
    times: torch.Tensor
    step_start: torch.Tensor
    mask: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.items.shape)  # type: ignore[return-value]

    def to(self, device) -> "Histories":
        return Histories(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def at(self, t: int) -> Interactions:
        return Interactions(self.items[:, t], self.concepts[:, t], self.responses[:, t], self.times[:, t])

    @property
    def applied(self) -> torch.Tensor:
        """(B, T) positions whose response updates the state: real ones with a response. A prediction
        request (NO_RESPONSE) is predicted and changes nothing, as in serving."""
        return self.mask & (self.responses >= 0)

    def window(self, start: int, stop: int) -> "Histories":
        """Positions [start, stop); step_start re-based so it stays an index into the slice."""
        ss = (self.step_start[:, start:stop] - start).clamp(min=0)
        return Histories(self.items[:, start:stop], self.concepts[:, start:stop],
                         self.responses[:, start:stop], self.times[:, start:stop], ss,
                         self.mask[:, start:stop])

    def spans(self, first: torch.Tensor, stop: torch.Tensor) -> "Histories":
        """Row b's positions [first[b], stop[b]), left-aligned and padded to the longest (windows cut
        per learner); step_start re-based as in ``window``."""
        lo, hi = int(first.min()), int(first.max())
        if lo == hi and bool((stop == stop[0]).all()):
            return self.window(lo, max(lo, int(stop[0])))
        T, C = self.shape[1], self.concepts.shape[2]
        width = int((stop - first).clamp(min=0).max())
        offset = torch.arange(width, device=first.device)
        pos = first.unsqueeze(1) + offset  # (B, W) position of each slot
        inside = pos < stop.unsqueeze(1)
        idx = pos.clamp(max=T - 1)
        take = lambda x: x.gather(1, idx)  # noqa: E731
        return Histories(torch.where(inside, take(self.items), PAD),
                         self.concepts.gather(1, idx.unsqueeze(-1).expand(-1, -1, C)) * inside.unsqueeze(-1),
                         torch.where(inside, take(self.responses), NO_RESPONSE),
                         torch.where(inside, take(self.times), math.nan),
                         torch.where(inside, (take(self.step_start) - first.unsqueeze(1)).clamp(min=0), offset),
                         take(self.mask) & inside)

    def select(self, rows) -> "Histories":
        return Histories(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def replace(self, **kw: Any) -> "Histories":
        return replace(self, **kw)


@dataclass
class LearnerHistory:
    """One learner's encoded history as numpy arrays (length T, concepts (T, C))."""

    learner_id: str
    items: np.ndarray
    concepts: np.ndarray
    responses: np.ndarray
    times: np.ndarray
    step_start: np.ndarray
    event_ids: list[str]

    def __len__(self) -> int:
        return len(self.items)

    def slice(self, start: int, stop: int) -> "LearnerHistory":
        ss = np.maximum(self.step_start[start:stop] - start, 0)
        return LearnerHistory(self.learner_id, self.items[start:stop], self.concepts[start:stop],
                              self.responses[start:stop], self.times[start:stop], ss,
                              self.event_ids[start:stop])


def count_before(h: LearnerHistory, limit_ms: int) -> int:
    """How many of a time-ordered history's events come before ``limit_ms``."""
    return int(np.searchsorted(h.times, limit_ms / 1000.0, side="left"))


def part(h: LearnerHistory, start: int, stop: int) -> LearnerHistory:
    """Positions ``start``..``stop`` of a history, its concept columns trimmed to the widest row among them
    (as encoding those events alone makes them)."""
    piece = h.slice(start, stop)
    width = max(1, int((piece.concepts != 0).sum(1).max())) if stop > start else 1
    piece.concepts = piece.concepts[:, :width]
    return piece


def before(histories: Sequence[LearnerHistory], end_ms: int) -> list[LearnerHistory]:
    """Each learner's events before ``end_ms`` (learners with none left out): the records before ``end_ms``,
    encoded, since a history is in event-time order."""
    out = []
    for h in histories:
        n = count_before(h, end_ms)
        if n:
            out.append(h if n == len(h) else part(h, 0, n))
    return out


def since(histories: Sequence[LearnerHistory], start_ms: int) -> list[LearnerHistory]:
    """Each learner's events at or after ``start_ms`` (learners with none left out)."""
    out = []
    for h in histories:
        n = count_before(h, start_ms)
        if n < len(h):
            out.append(h if n == 0 else part(h, n, len(h)))
    return out


def applied_first(applied: torch.Tensor) -> torch.Tensor:
    """(B, T) index that moves each row's applied positions to its front, in order (a stable sort):
    ``x.gather(1, order)`` holds a row's applied interactions left-aligned, as the serving path sees them.

    >>> applied_first(torch.tensor([[True, False, True, False]])).tolist()
    [[0, 2, 1, 3]]
    """
    return torch.argsort((~applied).to(torch.uint8), dim=1, stable=True)


def step_starts(step_keys: Sequence[Any]) -> np.ndarray:
    """First index of each position's step; a new step starts where the key changes.

    >>> step_starts([None, None, 5, 5, 6]).tolist()
    [0, 1, 2, 2, 4]
    """
    out = np.arange(len(step_keys), dtype=np.int64)
    for i in range(1, len(step_keys)):
        k = step_keys[i]
        if k is not None and k == step_keys[i - 1]:
            out[i] = out[i - 1]
    return out


def group_by_learner(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records per learner, in event-time order (ties: source order)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(r["learner_id"], []).append(r)
    for recs in out.values():
        if any(r.get("event_time") is not None for r in recs):
            recs.sort(key=lambda r: (r.get("event_time", -1), r.get("seq", 0)))
        elif any("seq" in r for r in recs):
            recs.sort(key=lambda r: r.get("seq", 0))
    return out


def encode_learner(learner_id: str, recs: list[dict[str, Any]], items: Vocabulary,
                   concepts: Vocabulary) -> LearnerHistory:
    n = len(recs)
    width = max([len(r.get("concept_ids") or ()) for r in recs] + [1])
    conc = np.zeros((n, width), dtype=np.int64)
    for i, r in enumerate(recs):
        for j, c in enumerate(r.get("concept_ids") or ()):
            conc[i, j] = concepts.encode(c)
    times = np.array([r["event_time"] / 1000.0 if r.get("event_time") is not None else np.nan
                      for r in recs], dtype=np.float64)
    resp = np.array([r["response"] if r.get("response") is not None else NO_RESPONSE for r in recs],
                    dtype=np.int64)
    steps = step_starts([step_key(r.get("step_id"), r.get("event_time")) for r in recs])
    return LearnerHistory(learner_id, np.array([items.encode(r["item_id"]) for r in recs], dtype=np.int64),
                          conc, resp, times, steps,
                          [r.get("event_id", "") for r in recs])


def encode(records: Iterable[dict[str, Any]], items: Vocabulary, concepts: Vocabulary) -> list[LearnerHistory]:
    """Canonical event records -> one encoded history per learner (sorted by learner id)."""
    grouped = group_by_learner(records)
    return [encode_learner(lid, grouped[lid], items, concepts) for lid in sorted(grouped)]


def build_vocabularies(records: Iterable[dict[str, Any]]) -> tuple[Vocabulary, Vocabulary]:
    """Item and concept vocabularies; call on the training window only."""
    recs = list(records)
    return (Vocabulary.build(r["item_id"] for r in recs),
            Vocabulary.build(c for r in recs for c in (r.get("concept_ids") or ())))


def collate(histories: Sequence[LearnerHistory], length: int | None = None) -> Histories:
    """Pad to (B, T) with T = `length` or the longest history."""
    B = len(histories)
    T = length or max(len(h) for h in histories)
    C = max(h.concepts.shape[1] for h in histories)
    items = np.full((B, T), PAD, dtype=np.int64)
    conc = np.zeros((B, T, C), dtype=np.int64)
    resp = np.full((B, T), NO_RESPONSE, dtype=np.int64)
    times = np.full((B, T), np.nan, dtype=np.float64)
    ss = np.tile(np.arange(T, dtype=np.int64), (B, 1))
    mask = np.zeros((B, T), dtype=bool)
    for b, h in enumerate(histories):
        n = min(len(h), T)
        items[b, :n] = h.items[:n]
        conc[b, :n, : h.concepts.shape[1]] = h.concepts[:n]
        resp[b, :n] = h.responses[:n]
        times[b, :n] = h.times[:n]
        ss[b, :n] = h.step_start[:n]
        mask[b, :n] = True
    return Histories(torch.from_numpy(items), torch.from_numpy(conc), torch.from_numpy(resp),
                     torch.from_numpy(times), torch.from_numpy(ss), torch.from_numpy(mask))


def assert_before(histories: Sequence[LearnerHistory], cutoff_ms: int, what: str = "training") -> None:
    """Raise `LeakageError` if any position's event time is >= cutoff_ms (or unknown).

    Times in histories are float64 seconds (event_time / 1000); dividing the
    cutoff the same way keeps the comparison exact: t_ms >= C implies t_ms/1000 >= C/1000.
    """
    limit = cutoff_ms / 1000.0
    for h in histories:
        bad = ~(h.times < limit)  # NaN (no clock) counts as bad: it cannot be shown to precede C
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise LeakageError(f"{what} history of learner {h.learner_id!r} holds event {str(h.event_ids[i])!r} at "
                               f"{h.times[i] * 1000.0:.0f} ms, not before the cutoff {cutoff_ms} ms")
