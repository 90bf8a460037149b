"""Serving many learners: their states held in preallocated memory, batched through one model.

A model family states the model contract (ktstream.models.base) and the kind of state it
keeps; this package does the rest: ``ModelRunner`` runs waves of events through the model,
a ``Layout`` per kind of state (``DenseLayout``, ``WindowedCacheLayout``; ``layout_for``)
stacks, updates and keeps the learners' states in arenas, ``rebuild_states`` passes raw
windows into states for new weights, and ``concept_mastery`` / ``mastery_curves`` read a learner's
per-concept mastery off a state.
"""

from ktstream.serving.arena import RowArena, RowState
from ktstream.serving.dense import DenseLayout
from ktstream.serving.layout import Layout
from ktstream.serving.layouts import LAYOUTS, layout_for
from ktstream.serving.mastery import concept_mastery, expected_score, mastery_curves, probe_items
from ktstream.serving.rebuild import Rebuilt, rebuild_state, rebuild_states
from ktstream.serving.runner import STACK_BYTES, ModelRunner, Prepares
from ktstream.serving.stacking import StackBuffer, split_state, stack_states
from ktstream.serving.window_arena import WindowArena, WindowState, count_of
from ktstream.serving.windowed_cache import WindowedCacheLayout

__all__ = ["LAYOUTS", "STACK_BYTES", "DenseLayout", "Layout", "ModelRunner", "Prepares", "Rebuilt", "RowArena",
           "RowState", "StackBuffer", "WindowArena", "WindowState", "WindowedCacheLayout", "concept_mastery",
           "count_of", "expected_score", "layout_for", "mastery_curves", "probe_items", "rebuild_state",
           "rebuild_states", "split_state", "stack_states"]
