"""Events, vocabularies and tiny models for the notebook API's tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ktstream
from ktstream.models import create, family


def simulated(n_learners: int = 6, mean_length: int = 25, seed: int = 3, n_categories: int = 2,
              requests: float = 0.0) -> list[dict]:
    """Simulated canonical events with steps (shared event times); responses spread over K categories, and a
    share of prediction requests (no response)."""
    events = ktstream.simulate(n_learners=n_learners, mean_length=mean_length, seed=seed, step_prob=0.3,
                               query_prob=requests)
    if n_categories > 2:
        rng = np.random.default_rng(seed)
        for r in events:
            if "response" in r:
                r["response"] = int(rng.integers(n_categories))
    return events


def tiny(name: str, vocab: ktstream.Vocab, n_categories: int = 2, seed: int = 0):
    """Family ``name`` with its tiny configuration, random weights, in eval mode."""
    torch.manual_seed(seed)
    return create(name, n_items=len(vocab.items), n_concepts=len(vocab.concepts), n_categories=n_categories,
                  **family(name).tiny_config).eval()


@pytest.fixture(scope="module")
def events() -> list[dict]:
    return simulated()


@pytest.fixture(scope="module")
def vocab(events) -> ktstream.Vocab:
    return ktstream.Vocab.build(events)
