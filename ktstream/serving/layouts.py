"""The layout of each kind of state, by the name a family declares (``KTModel.state_kind``)."""

from __future__ import annotations

from ktstream.models.base import KTModel
from ktstream.serving.dense import DenseLayout
from ktstream.serving.layout import Layout
from ktstream.serving.windowed_cache import WindowedCacheLayout

LAYOUTS: dict[str, type[Layout]] = {"dense": DenseLayout, "windowed": WindowedCacheLayout}


def layout_for(model: KTModel) -> Layout:
    """A new layout of the kind ``model`` declares, with memory of its own (one per runner)."""
    if model.state_kind not in LAYOUTS:
        raise ValueError(f"state_kind must be one of {sorted(LAYOUTS)}, got {model.state_kind!r}")
    return LAYOUTS[model.state_kind](model)
