"""Preallocated memory for the states of many learners (CPU serving).

Per state key one numpy array with a row per learner, so that a wave of learners is
stacked with one gather per key and updated with one scatter per key, instead of Python
work per learner and key (measured on SAKT's 600-learner waves: stack + append 18.4 -> 1.5
us per learner). ``RowArena`` holds fixed-shape states (an update writes fresh rows);
``WindowArena`` holds key/value windows, (rows, W + spare, ...) per cached name and
``time``, a learner's cache being a row and the slot its window starts at (``ArenaState``).

Appending one interaction writes the slot after the window and moves the window one slot
on, within the row: the previous state reads exactly what it read before, so a staged
state never changes a committed one, and a retry after an abort writes the same slot
again. When the row's spare slots are used up the window moves to a free row (one
window copy every ``spare_slots(W)`` updates). A row is free again when no state and no
tensor made from one refers to it (``Row`` returns it when it is collected), so the
cache evicting a learner, or the engine dropping a staged state, frees its memory.

A ``RowState`` (``ArenaState``) is a read-only mapping of the same (1, ...) tensors as any
other state: whatever does not know the arena (the store's codec, rebuilds, tests) reads
it as a plain state, through views of the row.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Mapping
from typing import Iterator

import numpy as np
import torch

State = dict[str, torch.Tensor]


def spare_slots(width: int) -> int:
    """Spare slots after the window in each row (memory: 1 + 1/4 windows)."""
    return max(16, width // 4)


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


class _Arena:
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


class WindowArena(_Arena):
    def __init__(self, dims: dict[str, int], width: int, dtype: torch.dtype, rows: int | None = None):
        self.dims, self.width, self.dtype = dict(dims), width, dtype
        self.slots = width + spare_slots(width)
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        shapes = {name: (self.slots, d) for name, d in dims.items()} | {"time": (self.slots,)}
        super().__init__(shapes, dict.fromkeys(dims, np_dtype) | {"time": np.float64}, rows)

    def gather(self, states: list[State], tail: dict[str, int] | None) -> State:
        """(B, L, ...) per name: the last L slots of each learner's window (L from ``tail``, as
        ``filled_slots`` gives it; None: the whole window), and counts."""
        W, S, flat = self.width, self.slots, []
        tail = W if tail is None else tail["time"]

        def take(a: np.ndarray, rows: np.ndarray | None, mine: list[int] | None) -> np.ndarray:
            if rows is None:  # a (1, W, ...) state of its own
                return a[:, W - tail:]
            if not flat:  # the same slots for every name
                firsts = np.fromiter((states[b].first for b in mine), np.intp, len(mine))
                flat.append((rows[:, None] * S + firsts[:, None] + np.arange(W - tail, W)).ravel())
            return np.take(_slots(a), flat[0], axis=0).reshape(len(mine), tail, *a.shape[2:])

        out = self._gather(states, take)
        out["count"] = torch.tensor([count_of(s) for s in states])
        return out

    def append(self, previous: list[State], entries: dict[str, np.ndarray]) -> list["ArenaState"]:
        """Each learner's state after one more interaction: ``previous[b]`` moved on by one slot,
        ending with ``entries[name][b]`` (every name and ``time``)."""
        W, S = self.width, self.slots
        stays = [isinstance(p, ArenaState) and p.row.arena is self and p.first + W < S for p in previous]
        new_rows = iter(self.allocate(len(previous) - sum(stays)))
        out, moves, copies = [], [], []  # moves: (from row, from first, to row); copies: (to row, plain state)
        cleared = []  # fresh rows of learners with no history that an earlier window left values in
        for p, stay in zip(previous, stays):
            if stay:
                out.append(ArenaState(p.row, p.first + 1, p.count + 1))
                continue
            row = next(new_rows)
            if isinstance(p, ArenaState) and p.row.arena is self:
                moves.append((p.row.index, p.first, row.index))
            elif count_of(p):
                copies.append((row.index, p))
            elif self.used[row.index]:  # no history: empty slots, zeros (a never-used row already is)
                cleared.append(row.index)
            out.append(ArenaState(row, 0, count_of(p) + 1))
        rows = np.fromiter((s.row.index for s in out), np.intp, len(out))
        ends = rows * S + np.fromiter((s.first for s in out), np.intp, len(out)) + (W - 1)  # flat slot numbers
        if moves:  # the last W - 1 slots of the old window become the first of the new
            src, first, dst = (np.array(c, np.intp)[:, None] for c in zip(*moves))
            kept = np.arange(W - 1)
            to, source = (dst * S + kept).ravel(), (src * S + first + 1 + kept).ravel()
        for name, a in self.arrays.items():
            slots = _slots(a)
            if moves:
                slots[to] = np.take(slots, source, axis=0)
            for row, p in copies:
                a[row, : W - 1] = p[name].numpy()[0, 1:]  # empty slots are zeros in every state
            if cleared:
                a[cleared, : W - 1] = 0
            slots[ends] = entries[name]
        # appends write from slot W - 1 on; a moved or copied window fills the slots before it
        self.used[[to_row for _, _, to_row in moves] + [row for row, _ in copies]] = True
        self.used[cleared] = False
        return out

    def __deepcopy__(self, memo) -> "WindowArena":
        return WindowArena(self.dims, self.width, self.dtype)  # a copied model starts with no learners

    def __reduce__(self):
        return WindowArena, (self.dims, self.width, self.dtype)


def _slots(a: np.ndarray) -> np.ndarray:
    """(rows * slots, ...) view of a window array (a view: arena arrays are C-contiguous, never
    sliced). One flat index per slot gathers along one axis, twice as fast as indexing rows and
    slots together (measured: 50 full windows 296 -> 153 us, 600 windows of 10 slots 211 -> 123)."""
    return a.reshape(-1, *a.shape[2:])


class RowArena(_Arena):
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

    def __deepcopy__(self, memo) -> "RowArena":
        return _row_arena(self.shapes, self.dtypes)  # a copied model starts with no learners

    def __reduce__(self):
        return _row_arena, (self.shapes, self.dtypes)


def _row_arena(shapes, dtypes) -> RowArena:
    return RowArena({k: torch.zeros(1, *s, dtype=dtypes[k]) for k, s in shapes.items()})


class Row:
    """A taken row of an arena; returned to it when the last state or tensor using it goes."""

    __slots__ = ("arena", "index")

    def __init__(self, arena: _Arena, index: int):
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


class ArenaState(RowState):
    """A learner's cache in a ``WindowArena``: ``row``, the window's ``first`` slot and ``count``.
    Reads as a state dict of (1, W, ...) views plus ``count``."""

    __slots__ = ("first", "count")

    def __init__(self, row: Row, first: int, count: int):
        self.row, self.first, self.count = row, first, count

    def __getitem__(self, key: str) -> torch.Tensor:
        if key == "count":
            return torch.tensor([self.count])
        arena = self.row.arena
        return self._view(arena.arrays[key][self.row.index, self.first : self.first + arena.width][None])

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
