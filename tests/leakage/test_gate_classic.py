"""The classic families' off-by-one leaks (tests/leakage/leaky_classic.py) fail the leakage gate,
each by the checks named here; the registered bkt and irt-pfa pass the same checks on the same
learners."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.leakage import GateConfig, run_gate
from ktstream.models import create, family
from tests.conftest import random_learner
from tests.leakage.leaky_classic import InclusiveCountsPFA, PosteriorBKT, StepMateBKT
from tests.leakage.test_gate import MODEL_CHECKS, N_CONCEPTS, N_ITEMS

# fixture -> (its honest family, the checks that must fail on it)
CAUGHT_BY = {
    PosteriorBKT: ("bkt", ["future_perturbation", "current_label_flip", "serving_equivalence"]),
    InclusiveCountsPFA: ("irt-pfa", ["future_perturbation", "current_label_flip", "serving_equivalence"]),
    StepMateBKT: ("bkt", ["future_perturbation", "serving_equivalence"]),
}


@pytest.fixture(scope="module")
def random_learners():
    rng = np.random.default_rng(0)
    return [random_learner(rng, n, N_ITEMS, N_CONCEPTS, 2, learner_id=f"u{i}")
            for i, n in enumerate([30, 5, 22, 40, 2, 33])]


@pytest.mark.parametrize("fixture", list(CAUGHT_BY), ids=lambda c: c.name)
def test_leaky_classic_model_fails_the_gate(fixture, random_learners):
    honest, checks = CAUGHT_BY[fixture]
    torch.manual_seed(0)
    model = fixture(N_ITEMS, N_CONCEPTS, **family(honest).tiny_config)
    report = run_gate(model, random_learners, GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert not report.passed, report.table()
    for check in checks:
        assert report[check].status == "fail", f"{fixture.name} not caught by {check}:\n{report.table()}"
        assert report[check].figure > report[check].bound


@pytest.mark.parametrize("name", ["bkt", "irt-pfa"])
def test_the_honest_families_pass_the_same_checks(name, random_learners):
    torch.manual_seed(0)
    model = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family(name).tiny_config)
    report = run_gate(model, random_learners, GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert report.passed, report.table()
