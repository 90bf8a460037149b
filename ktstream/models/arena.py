"""Preallocated memory for the key/value windows of many learners (CPU serving).

Per cached name (and ``time``) one (rows, W + spare, ...) numpy array; a learner's cache
is a row of it and the slot its window starts at (``ArenaState``), so a wave of learners
is stacked with one gather per name and updated with one scatter per name, instead of
Python work per learner and name (measured on SAKT's 600-learner waves: stack + append
18.4 -> 1.5 us per learner).

Appending one interaction writes the slot after the window and moves the window one slot
on, within the row: the previous state reads exactly what it read before, so a staged
state never changes a committed one, and a retry after an abort writes the same slot
again. When the row's spare slots are used up the window moves to a free row (one
window copy every ``spare_slots(W)`` updates). A row is free again when no state and no
tensor made from one refers to it (``Row`` returns it when it is collected), so the
cache evicting a learner, or the engine dropping a staged state, frees its memory.

An ``ArenaState`` is a read-only mapping of the same (1, W, ...) tensors as any other
cache state (``kvcache``): whatever does not know the arena (the store's codec, rebuilds,
tests) reads it as a plain state, through views of the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Iterator

import numpy as np
import torch

State = dict[str, torch.Tensor]


def spare_slots(width: int) -> int:
    """Spare slots after the window in each row (memory: 1 + 1/4 windows)."""
    return max(16, width // 4)


#: Memory an arena reserves at first (the engine's default cache bound). np.zeros leaves pages never
#: written untouched, so rows not yet used cost address space only; beyond it the arena grows by
#: copying (a pause of tens of milliseconds per 100 MB).
RESERVE_BYTES = 512 << 20


class WindowArena:
    def __init__(self, dims: dict[str, int], width: int, dtype: torch.dtype, rows: int | None = None):
        self.dims, self.width, self.dtype = dict(dims), width, dtype
        self.slots = width + spare_slots(width)
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        if rows is None:
            rows = max(64, RESERVE_BYTES // (self.slots * (sum(dims.values()) * np_dtype.itemsize + 8)))
        self.arrays = {name: np.zeros((rows, self.slots, d), np_dtype) for name, d in dims.items()}
        self.arrays["time"] = np.zeros((rows, self.slots), np.float64)
        self.free = list(range(rows - 1, -1, -1))
        self.used = np.zeros(rows, bool)  # written since it was made: no longer all zeros
        self.row_nbytes = sum(a[0].nbytes for a in self.arrays.values())

    def allocate(self, n: int) -> list["Row"]:
        while len(self.free) < n:
            self._grow()
        return [Row(self, self.free.pop()) for _ in range(n)]

    def _grow(self) -> None:
        """Twice the rows. States keep their row numbers; tensors made before read the old copy,
        whose slots they see are never written again. Rows never used are zeros: not copied."""
        old = len(self.used)
        written = int(np.flatnonzero(self.used)[-1]) + 1 if self.used.any() else 0
        for name, a in self.arrays.items():
            new = np.zeros((2 * old, *a.shape[1:]), a.dtype)
            new[:written] = a[:written]
            self.arrays[name] = new
        self.used = np.concatenate([self.used, np.zeros(old, bool)])
        self.free[:0] = range(2 * old - 1, old - 1, -1)

    def gather(self, states: list[State], tail: int) -> State:
        """(B, tail, ...) per name: the last ``tail`` slots of each learner's window, and counts.
        States not in this arena (a new learner's initial state, a rebuilt or restored one) are
        copied one by one."""
        W, B = self.width, len(states)
        mine = [b for b, s in enumerate(states) if isinstance(s, ArenaState) and s.row.arena is self]
        rows = np.fromiter((states[b].row.index for b in mine), np.intp, len(mine))[:, None]
        slots = np.fromiter((states[b].first for b in mine), np.intp, len(mine))[:, None] + np.arange(W - tail, W)
        others = [b for b in range(B) if not (isinstance(states[b], ArenaState) and states[b].row.arena is self)]
        out = {}
        for name, a in self.arrays.items():
            if not others:
                x = a[rows, slots]
            else:
                x = np.empty((B, tail, *a.shape[2:]), a.dtype)
                x[mine] = a[rows, slots]
                for b in others:
                    x[b] = states[b][name].numpy()[0, W - tail:]
            out[name] = torch.from_numpy(x)
        out["count"] = torch.tensor([count_of(s) for s in states])
        return out

    def append(self, previous: list[State], entries: dict[str, np.ndarray]) -> list["ArenaState"]:
        """Each learner's state after one more interaction: ``previous[b]`` moved on by one slot,
        ending with ``entries[name][b]`` (every name and ``time``)."""
        W, S = self.width, self.slots
        stays = [isinstance(p, ArenaState) and p.row.arena is self and p.first + W < S for p in previous]
        new_rows = iter(self.allocate(len(previous) - sum(stays)))
        out, moves, copies = [], [], []  # moves: (from row, from first, to row); copies: (to row, plain state)
        for p, stay in zip(previous, stays):
            if stay:
                out.append(ArenaState(p.row, p.first + 1, p.count + 1))
                continue
            row = next(new_rows)
            if isinstance(p, ArenaState) and p.row.arena is self:
                moves.append((p.row.index, p.first, row.index))
            elif count_of(p) or self.used[row.index]:
                copies.append((row.index, p))  # a fresh row of an initial state is already zeros
            out.append(ArenaState(row, 0, count_of(p) + 1))
        rows = np.fromiter((s.row.index for s in out), np.intp, len(out))
        ends = np.fromiter((s.first for s in out), np.intp, len(out)) + (W - 1)
        kept = np.arange(W - 1)  # the last W - 1 slots of the old window become the first of the new
        if moves:
            src, first, dst = (np.array(c, np.intp)[:, None] for c in zip(*moves))
        for name, a in self.arrays.items():
            if moves:
                a[dst, kept] = a[src, first + 1 + kept]
            for to, p in copies:
                a[to, : W - 1] = p[name].numpy()[0, 1:]  # empty slots are zeros in every state
            a[rows, ends] = entries[name]
        self.used[rows] = True
        return out

    def __deepcopy__(self, memo) -> "WindowArena":
        return WindowArena(self.dims, self.width, self.dtype)  # a copied model starts with no learners

    def __reduce__(self):
        return WindowArena, (self.dims, self.width, self.dtype)


class Row:
    """A taken row of an arena; returned to it when the last state or tensor using it goes."""

    __slots__ = ("arena", "index")

    def __init__(self, arena: WindowArena, index: int):
        self.arena, self.index = arena, index

    def __del__(self):
        self.arena.free.append(self.index)


class ArenaState(Mapping):
    """A learner's cache in an arena: ``row``, the window's ``first`` slot and ``count``. Reads as a
    state dict of (1, W, ...) views (plus ``count``); never written through."""

    __slots__ = ("row", "first", "count")

    def __init__(self, row: Row, first: int, count: int):
        self.row, self.first, self.count = row, first, count

    def __getitem__(self, key: str) -> torch.Tensor:
        if key == "count":
            return torch.tensor([self.count])
        arena = self.row.arena
        t = torch.from_numpy(arena.arrays[key][self.row.index, self.first : self.first + arena.width][None])
        t._row = self.row  # the row stays taken while this view lives
        return t

    def __iter__(self) -> Iterator[str]:
        return iter([*self.row.arena.arrays, "count"])

    def __len__(self) -> int:
        return len(self.row.arena.arrays) + 1

    @property
    def nbytes(self) -> int:
        return self.row.arena.row_nbytes + 8


def count_of(state: State) -> int:
    """Interactions the state has applied."""
    return state.count if isinstance(state, ArenaState) else int(state["count"])
