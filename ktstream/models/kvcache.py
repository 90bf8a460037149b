"""Per-learner key/value caches of the attention models: the last W applied interactions.

A cache is a plain state dict (leading dim B, so the engine can stack, split,
select and store it like any other model state):

- one (B, W, D) tensor per cached name (a layer's keys or values, or the
  relation vectors), stored in fp32 or fp16;
- ``time`` (B, W) float64 epoch seconds of each slot (NaN: no clock; 0: empty);
- ``count`` (B,) int64, interactions applied so far.

Slots are kept in order, oldest first and newest at slot W-1, so slot i holds
interaction number ``count - W + i`` (empty when negative): positions are
implied by the layout, never stored, and cached keys/values never need
recomputation when the window slides (position enters attention only as a
bias from distances). Empty slots hold zeros in every path, so the training
path's final state and the serving path's state compare exactly. How the engine holds
many learners' caches is ktstream.serving.windowed_cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

State = dict[str, torch.Tensor]


def empty(batch: int, width: int, dims: dict[str, int], dtype: torch.dtype, device=None) -> State:
    state = {name: torch.zeros(batch, width, d, dtype=dtype, device=device) for name, d in dims.items()}
    state["time"] = torch.zeros(batch, width, dtype=torch.float64, device=device)
    state["count"] = torch.zeros(batch, dtype=torch.long, device=device)
    return state


@dataclass
class KeySpace:
    """The keys new queries may attend to: the cached slots followed by a chunk of new positions."""

    pos: torch.Tensor  # (B, S) interaction number of each key
    valid: torch.Tensor  # (B, S) a real, applied interaction
    time: torch.Tensor  # (B, S) float64
    state: State | None = None
    dtype: torch.dtype = torch.float32  # compute dtype (an fp16 cache is widened to it)
    new: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (B, T, D) chunk entries
    _full: dict[str, torch.Tensor] = field(default_factory=dict)

    def add(self, name: str, new: torch.Tensor) -> None:
        self.new[name] = new

    def full(self, name: str) -> torch.Tensor:
        """(B, S, D): the cached slots of ``name`` followed by the chunk's entries (made once)."""
        if name not in self._full:
            new = self.new[name]
            self._full[name] = new if self.state is None else torch.cat([self.state[name].to(self.dtype), new], 1)
        return self._full[name]

    def extend(self, name: str, new: torch.Tensor) -> torch.Tensor:
        self.add(name, new)
        return self.full(name)


def keyspace(state: State | None, new_pos: torch.Tensor, new_valid: torch.Tensor, new_time: torch.Tensor,
             dtype: torch.dtype = torch.float32) -> KeySpace:
    """Positions, validity and times of cache ++ chunk (no cache: the chunk alone). Serving
    ``predict`` reads the cache without one (``attention.cached_window``)."""
    if state is None:
        return KeySpace(new_pos, new_valid, new_time, dtype=dtype)
    W = state["time"].shape[1]
    cached = state["count"].unsqueeze(1) - W + torch.arange(W, device=state["count"].device)  # (B, W)
    return KeySpace(torch.cat([cached, new_pos], 1), torch.cat([cached >= 0, new_valid], 1),
                    torch.cat([state["time"], new_time], 1), state=state, dtype=dtype)


def roll(ks: KeySpace, count: torch.Tensor, width: int, dtype: torch.dtype) -> State:
    """The last ``width`` valid keys of ``ks`` per learner, in order, as a new cache (inputs untouched).

    ``count`` (B,) is the number of interactions applied after the chunk.
    """
    slot = ks.pos - (count.unsqueeze(1) - width)  # (B, S): where each key lands
    keep = ks.valid & (slot >= 0) & (slot < width)
    index = torch.where(keep, slot, width)  # everything else goes to a spare slot that is cut off
    B = index.shape[0]

    def place(values: torch.Tensor) -> torch.Tensor:
        out = values.new_zeros(B, width + 1, *values.shape[2:])
        idx = index.view(B, -1, *([1] * (values.dim() - 2))).expand_as(values)
        return out.scatter(1, idx, values)[:, :width]  # (B, W, ...)

    state = {name: place(ks.full(name)).to(dtype) for name in ks.new}
    state["time"] = place(torch.where(keep, ks.time, 0.0))
    state["count"] = count
    return state


def shift(ks: KeySpace, dtype: torch.dtype) -> State:
    """The cache after exactly one new interaction per learner (serving ``update``): one copy.

    Same result as ``roll`` for that case: the oldest slot is evicted, the new
    entry lands in slot W-1.
    """
    assert ks.state is not None and all(v.shape[1] == 1 for v in ks.new.values()), "shift appends one per learner"
    state = {name: torch.cat([ks.state[name][:, 1:], new.to(dtype)], 1) for name, new in ks.new.items()}
    state["time"] = torch.cat([ks.state["time"][:, 1:], ks.time[:, -1:]], 1)
    state["count"] = ks.state["count"] + 1
    return state


def widen(state: State, width: int) -> State:
    """``state`` with every window of fewer than ``width`` slots padded in front with empty slots
    (zeros): the whole cache of a batch that was cut to its filled slots (``update`` and
    ``predict`` accept such a batch)."""
    cut = width - state["time"].shape[1]
    if cut == 0:
        return state
    return {k: v if k == "count" else F.pad(v, (0, 0, cut, 0) if v.dim() == 3 else (cut, 0)) for k, v in state.items()}


def nbytes(state: State) -> int:
    """Bytes of cached state per learner."""
    return sum(v[0].numel() * v.element_size() for v in state.values())
