"""The layout of fixed-shape states (an LSTM's hidden and cell state, a value memory).

An update on the learners' previous states writes the wave's new states into fresh rows of a
``RowArena`` with one copy per key (ktstream.serving.arena); without them, or off the CPU, the
new batch is split into per-learner tensors.
"""

from __future__ import annotations

from ktstream.data.histories import Interactions
from ktstream.models.base import State
from ktstream.serving.arena import RowArena, RowState
from ktstream.serving.layout import Layout
from ktstream.serving.stacking import StackBuffer, plain_cpu, split_state


class DenseLayout(Layout):
    """States whose every tensor has one shape per learner, stored whole."""

    arena: RowArena | None = None  # made on the first update on previous states, remade if the shapes change

    def update_rows(self, state: State, interaction: Interactions, previous: list[State] | None = None) -> list[State]:
        new = self.model.update(state, interaction)
        if previous is None or not plain_cpu(new):
            return split_state(new)
        if self.arena is None or not self.arena.fits(new):
            self.arena = RowArena(new)
        return self.arena.store(new)  # one copy per key for the wave

    def stack(self, states: list[State], tail: dict[str, int] | None, buffer: StackBuffer) -> State:
        if self.arena is None or not any(isinstance(s, RowState) for s in states):
            return buffer.stack(states, tail)
        return self.arena.gather(states)
