"""Preallocated memory for the states of many learners (CPU serving): rows of per-key arrays.

Per state key one numpy array with a row per learner, so that a wave of learners is stacked
with one gather per key and updated with one scatter per key, instead of Python work per
learner and key (measured on SAKT's 600-learner waves: stack + append 18.4 -> 1.5 us per
learner). ``RowArena`` holds fixed-shape states (an update writes fresh rows); key/value
windows have their own arena (ktstream.serving.window_arena).

A row is free again when no state and no tensor made from one refers to it (``Row`` returns
it when it is collected), so the cache evicting a learner, or the engine dropping a staged
state, frees its memory. A ``RowState`` is a read-only mapping of the same (1, ...) tensors as
any other state: whatever does not know the arena (the store's codec, rebuilds, tests) reads it
as a plain state, through views of the row.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Mapping
from typing import Iterator

import numpy as np
import torch

from ktstream.models.base import State

#: Memory an arena reserves at first (the engine's default cache bound). Pages never written are
#: never touched (``zeros``), so rows not yet used cost address space only; beyond it the arena grows by
#: copying (a pause of tens of milliseconds per 100 MB).
RESERVE_BYTES = 512 << 20


def zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """A zeroed array in an anonymous mapping of plain pages, each zero-filled on its first write.

    Not ``np.zeros``: for large arrays numpy asks the kernel for transparent huge pages (madvise),
    and where THP defrag is ``madvise`` (a common default) the first write into each 2 MB then
    compacts and zeroes it in place. A row is written a slot at a time, so huge pages buy no
    locality that is worth it. Measured on SAKT (130 KB rows): writing the first entries of
    ~200 new learners took 35-48 ms with huge pages, 1.1 ms with plain ones; a batch of new
    learners stalled the engine for that long.
    """
    count = math.prod(shape)
    buffer = mmap.mmap(-1, max(count * np.dtype(dtype).itemsize, 1))  # unmapped when the array goes
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux: plain pages even where THP is "always"
        buffer.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buffer, dtype, count).reshape(shape)


class Arena:
    """Rows of per-key numpy arrays, a free list and growth; subclasses decide what a row holds."""

    def __init__(self, row_shapes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype], rows: int | None):
        row_nbytes = sum(math.prod(shape) * np.dtype(dtypes[k]).itemsize for k, shape in row_shapes.items())
        rows = max(64, RESERVE_BYTES // max(row_nbytes, 1)) if rows is None else rows
        # pages of rows never used are never touched, so spare capacity costs no memory
        self.arrays = {k: zeros((rows, *shape), dtypes[k]) for k, shape in row_shapes.items()}
        self.free: list[int] = []  # rows given back, taken again first (last in, first out)
        self.top = 0  # rows from here on were never taken
        # window rows whose first W - 1 slots (where a new learner's empty slots are read) may not be zeros
        self.used = np.zeros(rows, bool)
        self.row_nbytes = row_nbytes

    def allocate(self, n: int) -> list["Row"]:
        reused = [Row(self, self.free.pop()) for _ in range(min(n, len(self.free)))]
        n -= len(reused)
        while self.top + n > len(self.used):
            self._grow()
        self.top += n
        return reused + [Row(self, i) for i in range(self.top - n, self.top)]

    def _grow(self) -> None:
        """Twice the rows. States keep their row numbers; tensors made before read the old copy,
        whose slots they see are never written again. Rows never taken are zeros: not copied."""
        old = len(self.used)
        for name, a in self.arrays.items():
            new = zeros((2 * old, *a.shape[1:]), a.dtype)
            new[: self.top] = a[: self.top]
            self.arrays[name] = new
        self.used = np.concatenate([self.used, np.zeros(old, bool)])

    def _gather(self, states: list[State], take) -> State:
        """Per key, ``take(array, rows, mine)`` for the states in this arena (``mine``: their places
        in ``states``) and ``take(array, None, None)`` of each other state's (1, ...) array (a new
        learner's initial state, a rebuilt or restored one), copied once per distinct state (new
        learners share one initial state)."""
        own = [isinstance(s, RowState) and s.row.arena is self for s in states]
        mine = [b for b, o in enumerate(own) if o]
        others: dict[int, list[int]] = {}  # id of a state -> its places
        for b, o in enumerate(own):
            if not o:
                others.setdefault(id(states[b]), []).append(b)
        rows = np.fromiter((states[b].row.index for b in mine), np.intp, len(mine))
        out = {}
        for name, a in self.arrays.items():
            got = take(a, rows, mine)
            if others:
                x = np.empty((len(states), *got.shape[1:]), a.dtype)
                x[mine] = got
                for places in others.values():
                    x[places] = take(states[places[0]][name].numpy(), None, None)
                got = x
            out[name] = torch.from_numpy(got)
        return out


class RowArena(Arena):
    """Fixed-shape states (an LSTM's hidden and cell state, a value memory): a learner's state is
    one row per key, and an update writes the wave's new states into fresh rows with one copy per
    key instead of one tensor per learner and key (``split_state``); the previous rows are freed
    when nothing refers to them."""

    def __init__(self, like: State, rows: int | None = None):
        self.shapes = {k: tuple(v.shape[1:]) for k, v in like.items()}
        self.dtypes = {k: v.dtype for k, v in like.items()}
        super().__init__(self.shapes, {k: torch.empty(0, dtype=d).numpy().dtype for k, d in self.dtypes.items()}, rows)

    def fits(self, state: State) -> bool:
        return all(k in self.shapes and tuple(v.shape[1:]) == self.shapes[k] and v.dtype == self.dtypes[k]
                   for k, v in state.items()) and len(state) == len(self.shapes)

    def store(self, batch: State) -> list["RowState"]:
        """Each learner's row of ``batch`` (leading dim B) in a fresh row."""
        taken = self.allocate(len(next(iter(batch.values()))))
        rows = np.fromiter((r.index for r in taken), np.intp, len(taken))
        for name, a in self.arrays.items():
            a[rows] = batch[name].numpy()
        return [RowState(r) for r in taken]

    def gather(self, states: list[State], tail: dict[str, int] | None = None) -> State:
        """(B, ...) per key (``tail`` is for windows: fixed-shape states are stacked whole)."""
        return self._gather(states, lambda a, rows, _: a if rows is None else a[rows])


class Row:
    """A taken row of an arena; returned to it when the last state or tensor using it goes."""

    __slots__ = ("arena", "index")

    def __init__(self, arena: Arena, index: int):
        self.arena, self.index = arena, index

    def __del__(self):
        self.arena.free.append(self.index)


class RowState(Mapping):
    """A learner's state in a ``RowArena`` row. Reads as a state dict of (1, ...) views; never
    written through."""

    __slots__ = ("row",)

    def __init__(self, row: Row):
        self.row = row

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._view(self.row.arena.arrays[key][self.row.index][None])

    def _view(self, array: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(array)
        t._row = self.row  # the row stays taken while this view lives
        return t

    def __iter__(self) -> Iterator[str]:
        return iter(self.row.arena.arrays)

    def __len__(self) -> int:
        return len(self.row.arena.arrays)

    @property
    def nbytes(self) -> int:
        return self.row.arena.row_nbytes

