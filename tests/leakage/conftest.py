"""The data the gate tests share: a few random learners with steps and clocks (lengths 2 to 40), and the
real-data slice (ASSISTments 2009, AKT's fold 1), built once per module that asks for them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import random_learner, require_dataset
from tests.leakage.realdata import akt_slice

N_ITEMS, N_CONCEPTS = 30, 12


@pytest.fixture(scope="module")
def random_learners():
    rng = np.random.default_rng(0)
    return [random_learner(rng, n, N_ITEMS, N_CONCEPTS, 2, learner_id=f"u{i}")
            for i, n in enumerate([30, 5, 22, 40, 2, 33])]


@pytest.fixture(scope="module")
def real_slice():
    pytest.importorskip("connectors.datasets.akt")
    return akt_slice(require_dataset("assist2009_akt_pid"))
