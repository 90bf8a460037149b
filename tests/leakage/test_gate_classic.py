"""The classic families' off-by-one leaks (tests/leakage/leaky_classic.py) fail the leakage gate,
each by the checks named here; the registered bkt and irt-pfa pass the same checks on the same
learners."""

from __future__ import annotations

import pytest
import torch

from ktstream.leakage import GateConfig, run_gate
from ktstream.models import create, family
from tests.leakage.leaky_classic import InclusiveCountsPFA, PosteriorBKT, StepMateBKT
from tests.leakage.caught import MODEL_CHECKS, assert_caught
from tests.leakage.conftest import N_CONCEPTS, N_ITEMS

# fixture -> (its honest family, the checks that must fail on it)
CAUGHT_BY = {
    PosteriorBKT: ("bkt", ["future_perturbation", "current_label_flip", "serving_equivalence"]),
    InclusiveCountsPFA: ("irt-pfa", ["future_perturbation", "current_label_flip", "serving_equivalence"]),
    StepMateBKT: ("bkt", ["future_perturbation", "serving_equivalence"]),
}


@pytest.mark.parametrize("fixture", list(CAUGHT_BY), ids=lambda c: c.name)
def test_leaky_classic_model_fails_the_gate(fixture, random_learners):
    honest, checks = CAUGHT_BY[fixture]
    torch.manual_seed(0)
    model = fixture(N_ITEMS, N_CONCEPTS, **family(honest).tiny_config)
    assert_caught(model, random_learners, checks, fixture.name)


@pytest.mark.parametrize("name", ["bkt", "irt-pfa"])
def test_the_honest_families_pass_the_same_checks(name, random_learners):
    torch.manual_seed(0)
    model = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family(name).tiny_config)
    report = run_gate(model, random_learners, GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert report.passed, report.table()
