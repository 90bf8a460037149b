"""The knowledge-tracing model contract: two paths over the same parameters.

Training path
    ``forward(histories, state=None) -> (log_probs, final_state)``.
    ``log_probs[b, t]`` (B, T, K) is the *prequential* prediction for position t:
    a function of the learner's interactions at positions < ``step_start[b, t]``
    (plus ``state``, the learner's state before position 0) and of t's query part
    (item, concepts, time) only. Never of t's response, of anything later, or of
    another row of the batch. Padded positions (mask False) must not change the
    final state. ``final_state`` is the serving state after the last valid
    position (models that cannot carry state return None and declare a
    ``receptive_field``).

Serving path (batched over learners, B = learners in the wave)
    ``init_state(B)``: state of a learner with no history (dict of tensors, leading dim B).
    ``predict(state, query) -> probs`` (B, K): never mutates ``state``.
    ``update(state, interaction) -> new_state``: applies one interaction per
    learner; returns a new dict and leaves the input untouched, so a caller can
    stage changes and drop them (the commit protocol relies on this).

Invariant 2 (train/serve equivalence): feeding a history through ``predict``
then ``update`` one interaction at a time (all queries of a step predicted
before the step's updates) gives ``forward``'s outputs within 1e-5 in fp32.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from ktstream.data.histories import Histories, Interactions
from ktstream.models.arena import RowArena, RowState

State = dict[str, torch.Tensor]


class KTModel(nn.Module):
    """Base class of every model family; see the module docstring for the contract."""

    name: ClassVar[str] = "base"
    #: True when ``forward`` accepts and returns the serving state (recurrent models):
    #: long histories are then trained in chunks with the state carried over.
    carries_state: ClassVar[bool] = True
    #: Small constructor arguments (besides vocab sizes) for fast contract tests.
    tiny_config: ClassVar[dict[str, Any]] = {}

    def __init__(self, n_items: int, n_concepts: int, n_categories: int = 2):
        super().__init__()
        if n_categories < 2:
            raise ValueError(f"n_categories must be >= 2, got {n_categories}")
        self.n_items = n_items
        self.n_concepts = n_concepts
        self.n_categories = n_categories
        self._arena = None  # serving memory of per-learner states (ktstream.models.arena), made on first use

    # -- training path ---------------------------------------------------
    def forward(self, histories: Histories, state: State | None = None) -> tuple[torch.Tensor, State | None]:
        raise NotImplementedError

    # -- serving path ----------------------------------------------------
    def init_state(self, batch_size: int) -> State:
        raise NotImplementedError

    def predict(self, state: State, query: Interactions) -> torch.Tensor:
        raise NotImplementedError

    def update(self, state: State, interaction: Interactions) -> State:
        raise NotImplementedError

    def describe(self, state: State, query: Interactions) -> dict[str, torch.Tensor]:
        """Extra per-learner outputs for a prediction (ability, mastery, attention).
        Models with nothing to add return an empty dict."""
        return {}

    def update_rows(self, state: State, interaction: Interactions, previous: list[State] | None = None) -> list[State]:
        """``update``, returned per learner (leading dim 1): what the engine keeps. Rows never view
        ``state`` (a reused stacking buffer). ``previous``, when given, holds the per-learner states
        ``state`` was stacked from: models whose new state is mostly the old one moved (key/value
        caches) override this to build each learner's state on its previous memory, leaving the
        previous state's values as they were."""
        new = self.update(state, interaction)
        if previous is None or not _plain_cpu(new):
            return split_state(new)
        if self._arena is None or not self._arena.fits(new):
            self._arena = RowArena(new)
        return self._arena.store(new)  # one copy per key for the wave (ktstream.models.arena)

    def prepare(self, interactions: Interactions) -> Interactions:
        """The interactions with what ``predict`` and ``update`` compute from them alone (embeddings,
        addressing) computed once, for a whole micro-batch (``histories.Prepared``); the engine then
        hands each wave its rows (``Interactions.take``). The default prepares nothing."""
        return interactions

    def entries(self, interactions: Interactions) -> dict[str, np.ndarray] | None:
        """What ``update_rows`` on previous states adds for each interaction (name -> (N, ...)
        arrays, for ``append_entries``), when that depends on the interactions alone, never on the
        state; None (the default) when it does. The engine then applies a micro-batch's waves
        with ``append_entries`` alone and predicts every event in one call (states are never
        written once made, so each event's query state still reads what it read in its wave)."""
        return None

    def append_entries(self, previous: list[State], entries: dict[str, np.ndarray]) -> list[State]:
        """``update_rows`` of ``previous`` (one learner each) by the ``entries`` of their interactions."""
        raise NotImplementedError

    def stack(self, states: list[State], tail: dict[str, int] | None) -> State | None:
        """Per-learner states stacked by the model itself (cut to ``tail`` as ``filled_slots`` says),
        when it keeps them in memory of its own (``update_rows`` on previous states puts them in rows
        of an arena); None: the caller stacks them."""
        if self._arena is None or not any(isinstance(s, RowState) for s in states):
            return None
        return self._arena.gather(states, tail)

    def filled_slots(self, states: list[State], update: bool = False) -> dict[str, int] | None:
        """For per-learner states about to be stacked for ``predict`` (``update``: for ``update_rows``
        with ``previous``): the state keys whose dim 1 is a window of slots, oldest first, each with
        how many trailing slots the call reads (at most those any of these learners fills; the
        leading ones are empty for all of them). Models that return keys here give the results of
        the whole batch from a batch cut to those slots. None: stack every tensor whole."""
        return None

    def predict_described(self, state: State, query: Interactions,
                          max_values: int | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``predict`` and ``describe`` together; models whose two share a read of the state override it.
        With ``max_values``, entries of more numbers per learner may be left out (the engine's messages
        carry ability, mastery, and other entries of at most that many numbers)."""
        return self.predict(state, query), self.describe(state, query)

    def receptive_field(self) -> int | None:
        """Positions of history a prediction can depend on (None: unbounded, recurrent)."""
        return None

    def config(self) -> dict[str, Any]:
        """Constructor arguments, JSON-serialisable, so the registry can rebuild the model."""
        raise NotImplementedError


def stack_states(states: list[State], out: State | None = None) -> State:
    """Per-learner states (leading dim 1) -> one batched state, written into ``out`` when given
    (tensors of exactly the batched shapes, e.g. a reused buffer: see ktstream.engine.runner)."""
    if out is None:
        return {k: torch.cat([s[k] for s in states]) for k in states[0]}
    return {k: torch.cat([s[k] for s in states], out=out[k]) for k in states[0]}


def split_state(state: State) -> list[State]:
    """Batched state -> per-learner states (leading dim 1, copied so they own their memory).

    CPU tensors are copied row by row through numpy, a third of torch's per-call overhead
    (measured: 12 -> 5 us per DKT learner), the same bytes.
    """
    if _plain_cpu(state):
        arrays = {k: v.numpy() for k, v in state.items()}
        n = next(iter(arrays.values())).shape[0]
        return [{k: torch.from_numpy(a[b : b + 1].copy()) for k, a in arrays.items()} for b in range(n)]
    columns = {k: [row.clone() for row in v.split(1)] for k, v in state.items()}  # one split per key
    return [dict(zip(columns, rows)) for rows in zip(*columns.values())]


def _plain_cpu(state: State) -> bool:
    """Every tensor on the CPU, numpy-compatible and outside autograd: it can be copied as arrays."""
    return all(v.device.type == "cpu" and v.dtype != torch.bfloat16 and not v.requires_grad for v in state.values())


def select_state(state: State, rows: torch.Tensor) -> State:
    return {k: v[rows] for k, v in state.items()}


def where_state(cond: torch.Tensor, new: State, old: State) -> State:
    """Row-wise choice: rows where ``cond`` (B,) is True take ``new``."""
    out = {}
    for k, v in new.items():
        c = cond.view(-1, *([1] * (v.dim() - 1)))
        out[k] = torch.where(c, v, old[k])
    return out


def gather_steps(per_prefix: torch.Tensor, step_start: torch.Tensor) -> torch.Tensor:
    """Pick, for each position t, the row computed after ``step_start[b, t]`` interactions.

    per_prefix: (B, T+1, ...) where index i holds the value after i interactions.
    Returns (B, T, ...).
    """
    B, T = step_start.shape
    idx = step_start.view(B, T, *([1] * (per_prefix.dim() - 2))).expand(B, T, *per_prefix.shape[2:])
    return per_prefix.gather(1, idx)
