"""How the serving layer holds many learners' states of one kind: the ``Layout`` contract.

A model family says what kind of state it keeps (``KTModel.state_kind``); the runner asks
``layout_for(model)`` (ktstream.serving.layouts) for the layout of that kind and leaves every question of memory to it:

- ``update_rows(state, interaction, previous)``: the model's ``update`` of a stacked batch,
  returned per learner (leading dim 1 each), never viewing ``state`` (a reused stacking
  buffer). Given ``previous`` (the per-learner states ``state`` was stacked from), a layout
  may keep the new states in preallocated memory of its own, leaving ``previous`` as it was.
- ``stack(states, tail, buffer)``: per-learner states (its own and plain ones mixed) as one
  batch, cut to ``tail``; ``buffer`` (a ``StackBuffer``) when the layout holds none of them.
- ``filled_slots(states, update)``: keys whose dim 1 is a window of slots, oldest first, each
  with how many trailing slots the call reads (None: stack every tensor whole).
- ``entries(interactions)`` / ``append_entries(previous, entries)``: when an update appends
  what the interactions alone determine, the runner applies a micro-batch's waves with
  ``append_entries`` and predicts every event in one call (None: it does not).

Every layout gives the same states as the model's ``update`` (tests/serving/test_layouts.py).
"""

from __future__ import annotations

import numpy as np

from ktstream.data.histories import Interactions
from ktstream.models.base import KTModel, State
from ktstream.serving.stacking import StackBuffer


class Layout:
    """Per-learner states of one model, held for serving; see the module docstring."""

    def __init__(self, model: KTModel):
        self.model = model

    def update_rows(self, state: State, interaction: Interactions, previous: list[State] | None = None) -> list[State]:
        raise NotImplementedError

    def stack(self, states: list[State], tail: dict[str, int] | None, buffer: StackBuffer) -> State:
        raise NotImplementedError

    def filled_slots(self, states: list[State], update: bool = False) -> dict[str, int] | None:
        return None

    def entries(self, interactions: Interactions) -> dict[str, np.ndarray] | None:
        return None

    def append_entries(self, previous: list[State], entries: dict[str, np.ndarray]) -> list[State]:
        raise NotImplementedError(f"{type(self).__name__} appends no entries")

