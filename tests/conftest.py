"""Shared test helpers: random histories with steps, several concepts and real-looking times."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from ktstream.data.histories import LearnerHistory, collate

# One thread: the models under test are small, and CI has 2 cores shared with the broker and subprocesses.
torch.set_num_threads(1)


def data_root() -> Path:
    return Path(os.environ.get("KTSTREAM_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


def require_dataset(name: str) -> Path:
    path = data_root() / name
    if not path.is_dir():
        pytest.skip(f"real dataset {name!r} not found at {path}; set KTSTREAM_DATA to the folder holding it")
    return path


def random_learner(rng: np.random.Generator, length: int, n_items: int, n_concepts: int, n_categories: int,
                   step_prob: float = 0.2, max_concepts: int = 3, learner_id: str = "u") -> LearnerHistory:
    items = rng.integers(2, n_items, size=length)
    conc = np.zeros((length, max_concepts), dtype=np.int64)
    for i in range(length):
        k = rng.integers(0, max_concepts + 1)
        conc[i, :k] = rng.integers(2, n_concepts, size=k)
    resp = rng.integers(0, n_categories, size=length)
    gaps = rng.exponential(300.0, size=length)
    gaps[rng.random(length) < step_prob] = 0.0  # shared event time -> one step
    times = 1.7e9 + np.cumsum(gaps)
    gaps[0] = 1.0
    starts = np.arange(length)
    for i in range(1, length):
        if gaps[i] == 0.0:
            starts[i] = starts[i - 1]
    return LearnerHistory(learner_id, items.astype(np.int64), conc, resp.astype(np.int64), times, starts,
                          [f"{learner_id}-{i}" for i in range(length)])


@pytest.fixture
def make_histories():
    """Factory: make_histories(lengths, n_items, n_concepts, K, seed) -> (list[LearnerHistory], Histories)."""

    def make(lengths, n_items=30, n_concepts=12, n_categories=2, seed=0, step_prob=0.2):
        rng = np.random.default_rng(seed)
        learners = [random_learner(rng, n, n_items, n_concepts, n_categories, step_prob, learner_id=f"u{i}")
                    for i, n in enumerate(lengths)]
        return learners, collate(learners)

    return make
