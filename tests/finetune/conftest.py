"""Shared fixtures of the fine-tuning tests: a small simulated stream spread over days, tiny configs."""

from __future__ import annotations

import numpy as np
import pytest

from ktstream.data.simulate import simulate
from ktstream.finetune.finetune import FinetuneConfig
from ktstream.finetune.promotion import PromotionConfig
from ktstream.leakage import GateConfig

DAY_MS = 86_400_000


@pytest.fixture
def stream():
    """(records, C, H): 40 learners over ~11 days; C at the median event time, H such that C+2H < the end."""
    recs = simulate(n_learners=40, n_items=30, n_concepts=6, mean_length=40, seed=0,
                    start_spread_ms=10 * DAY_MS, mean_gap_ms=3_600_000)
    times = np.array([r["event_time"] for r in recs])
    C = int(np.quantile(times, 0.5))
    H = int((np.quantile(times, 0.75) - C))
    return recs, C, H


def tiny_finetune(**kw) -> FinetuneConfig:
    return FinetuneConfig(**{"epochs": 2, "batch_tokens": 400, "lr": 1e-2, "patience": 2, "segment": 50,
                             "progress": False, **kw})


def fast_gate(**kw) -> GateConfig:
    return GateConfig(**{"random_label_epochs": 1, "n_learners": 4, "max_length": 60, **kw})


def fast_promotion(**kw) -> PromotionConfig:
    return PromotionConfig(**{"bootstrap": 200, "gate": fast_gate(), **kw})


TINY_DKT = {"dim": 8, "hidden": 12}
