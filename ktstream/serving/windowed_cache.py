"""The layout of key/value windows (attention caches, ktstream.models.kvcache), for ``WindowedKT``.

On the CPU, an update on the learners' previous states appends one entry per learner and
name in a ``WindowArena`` (ktstream.serving.window_arena) instead of copying each window.
When no encoder stack attends over the cache on the way in, what an update appends depends
on the interactions alone (``entries``), so the runner can apply a micro-batch's waves with
``append_entries`` and predict every event in one call. Learners with short histories are
stacked without their empty leading slots (``filled_slots``): they cost what they hold.
"""

from __future__ import annotations

import numpy as np
import torch

from ktstream.data.histories import Interactions
from ktstream.models import kvcache
from ktstream.models.base import State
from ktstream.models.windowed import CACHE_DTYPES, WindowedKT
from ktstream.serving.layout import Layout
from ktstream.serving.stacking import StackBuffer
from ktstream.serving.window_arena import WindowArena, WindowState, count_of


class WindowedCacheLayout(Layout):
    """Caches of a ``WindowedKT``: per cached name (1, W, D), ``time`` (1, W) and ``count`` (1,)."""

    model: WindowedKT

    def __init__(self, model: WindowedKT):
        super().__init__(model)
        self.dtype = CACHE_DTYPES[model.cache_dtype]
        self._arena: WindowArena | None = None

    def arena(self) -> WindowArena:
        """The memory of the windows ``update_rows`` builds on previous states (made on first use)."""
        if self._arena is None:
            self._arena = WindowArena(self.model.cache_dims(), self.model.window, self.dtype)
        return self._arena

    def update_rows(self, state: State, interaction: Interactions, previous: list[State] | None = None) -> list[State]:
        m = self.model
        if previous is not None and all(t.device.type == "cpu" for t in state.values()):
            # one entry written per learner, not a window copied; ``state`` may be cut (filled_slots)
            if reads_cache(m):
                new = m.appended(state, interaction).new
                return self.arena().append(previous, entry_arrays(new, interaction.times, self.dtype))
            return self.append_entries(previous, self._entries(interaction))  # no key space
        return shift_rows(m.appended(kvcache.widen(state, m.window), interaction), self.dtype)

    def entries(self, interactions: Interactions) -> dict[str, np.ndarray] | None:
        """The cache entries of the interactions, when no encoder stack attends over the cache on the
        way in (they depend on the interactions alone) and windows live in the arena (CPU)."""
        if reads_cache(self.model) or self.model.head[0].weight.device.type != "cpu":
            return None
        return self._entries(interactions)

    def _entries(self, interactions: Interactions) -> dict[str, np.ndarray]:
        return entry_arrays(self.model.cache_entries(interactions), interactions.times, self.dtype)

    def append_entries(self, previous: list[State], entries: dict[str, np.ndarray]) -> list[State]:
        return self.arena().append(previous, entries)

    def stack(self, states: list[State], tail: dict[str, int] | None, buffer: StackBuffer) -> State:
        if self._arena is None or not any(isinstance(s, WindowState) for s in states):
            return buffer.stack(states, tail)
        return self._arena.gather(states, tail)

    def filled_slots(self, states: list[State], update: bool = False) -> dict[str, int] | None:
        """The last min(W, most interactions any of them applied) slots: the earlier ones are empty
        (zeros) for every learner, so predict need not stack or read them, and short histories
        cost what they hold, not a whole window. ``update_rows`` reads no slot unless encoder stacks
        attend over them: it appends to ``previous``. CPU states only (``update_rows`` appends in
        place there)."""
        if not isinstance(states[0], WindowState) and states[0]["count"].device.type != "cpu":
            return None
        m = self.model
        filled = 0 if update and not reads_cache(m) else min(m.window, max(count_of(s) for s in states))
        return None if filled == m.window else dict.fromkeys([*m.cache_dims(), "time"], filled)


def reads_cache(model: WindowedKT) -> bool:
    """Whether what an update appends reads the cache: encoder stacks attend over it, or the family
    says so (``appends_from_cache``: DisKT's key of an interaction is a retriever read)."""
    return bool(model.encoders) or getattr(model, "appends_from_cache", False)


def shift_rows(ks: kvcache.KeySpace, dtype: torch.dtype) -> list[State]:
    """``kvcache.shift``, built per learner (leading dim 1 each, each owning its memory): one copy of
    each learner's cache, where ``shift`` then a split would copy it twice."""
    assert ks.state is not None and all(v.shape[1] == 1 for v in ks.new.values()), "shift appends one per learner"
    old, new = ks.state, {name: v.to(dtype) for name, v in ks.new.items()}
    times, counts = ks.time[:, -1:], old["count"] + 1
    out = []
    for b in range(counts.shape[0]):
        row = {name: torch.cat([old[name][b:b + 1, 1:], v[b:b + 1]], 1) for name, v in new.items()}
        row["time"] = torch.cat([old["time"][b:b + 1, 1:], times[b:b + 1]], 1)
        row["count"] = counts[b:b + 1].clone()
        out.append(row)
    return out


def entry_arrays(new: dict[str, torch.Tensor], times: torch.Tensor, dtype: torch.dtype) -> dict[str, np.ndarray]:
    """One new entry per learner (name -> (B, 1, D)) and ``times`` (B,) as the (B, D) and (B,)
    arrays a ``WindowArena`` appends, in its ``dtype``."""
    assert all(v.shape[1] == 1 for v in new.values()), "append one per learner"
    out = {name: (v if v.dtype == dtype else v.to(dtype)).numpy()[:, 0] for name, v in new.items()}
    out["time"] = times.numpy()
    return out
