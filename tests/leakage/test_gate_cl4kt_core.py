"""The leakage gate fails the leaky variants of CL4KT and CORE (tests/leakage/leaky_cl4kt_core.py), each by
the named checks, and passes the honest families on the same learners."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.leakage import GateConfig, run_gate
from ktstream.models import create, family
from tests.conftest import random_learner
from tests.leakage.leaky_cl4kt_core import LEAKY_VARIANTS

MODEL_CHECKS = ("future_perturbation", "current_label_flip", "batch_independence", "serving_equivalence",
                "attention_masking")
N_ITEMS, N_CONCEPTS = 30, 12

CAUGHT_BY = {
    "permuted_training_cl4kt": ["future_perturbation"],  # t itself never precedes t: no label flip shows
    "response_bias_core": ["future_perturbation", "current_label_flip"],
}
HONEST = {"permuted_training_cl4kt": "cl4kt", "response_bias_core": "core"}


@pytest.fixture(scope="module")
def learners():
    rng = np.random.default_rng(0)
    return [random_learner(rng, n, N_ITEMS, N_CONCEPTS, 2, learner_id=f"u{i}")
            for i, n in enumerate([30, 5, 22, 40, 2, 33])]


@pytest.mark.parametrize("fixture", sorted(CAUGHT_BY))
def test_leaky_variant_fails_the_gate_and_its_honest_family_passes(fixture, learners):
    name = HONEST[fixture]
    torch.manual_seed(0)
    leaky = LEAKY_VARIANTS[fixture](N_ITEMS, N_CONCEPTS, **family(name).tiny_config)
    report = run_gate(leaky, learners, GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert not report.passed, report.table()
    for check in CAUGHT_BY[fixture]:
        assert report[check].status == "fail", f"{fixture} not caught by {check}:\n{report.table()}"
    torch.manual_seed(0)
    honest = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family(name).tiny_config)
    report = run_gate(honest, learners, GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert report.passed, report.table()
