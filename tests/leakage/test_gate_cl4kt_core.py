"""The leakage gate fails the leaky variants of CL4KT and CORE (tests/leakage/leaky_cl4kt_core.py), each by
the named checks, and passes the honest families on the same learners; CORE around windowed bases (the
registered tiny config wraps DKT, which test_gate.py runs) passes every check on real data."""

from __future__ import annotations

import pytest
import torch

from ktstream.leakage import GateConfig, GateData, run_gate
from ktstream.models import create, family
from ktstream.training.trainer import TrainConfig, fit
from tests.leakage.leaky_cl4kt_core import LEAKY_VARIANTS
from tests.leakage.caught import MODEL_CHECKS, assert_caught
from tests.leakage.conftest import N_CONCEPTS, N_ITEMS
from tests.leakage.test_gate import CI_CONFIG


CAUGHT_BY = {
    "permuted_training_cl4kt": ["future_perturbation"],  # t itself never precedes t: no label flip shows
    "response_bias_core": ["future_perturbation", "current_label_flip"],
}
HONEST = {"permuted_training_cl4kt": "cl4kt", "response_bias_core": "core"}


@pytest.mark.parametrize("fixture", sorted(CAUGHT_BY))
def test_leaky_variant_fails_the_gate_and_its_honest_family_passes(fixture, random_learners):
    name = HONEST[fixture]
    torch.manual_seed(0)
    leaky = LEAKY_VARIANTS[fixture](N_ITEMS, N_CONCEPTS, **family(name).tiny_config)
    assert_caught(leaky, random_learners, CAUGHT_BY[fixture], fixture)
    torch.manual_seed(0)
    honest = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family(name).tiny_config)
    report = run_gate(honest, random_learners, GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert report.passed, report.table()


@pytest.mark.parametrize("base", ["sakt", "simplekt"])
def test_core_around_a_windowed_base_passes_every_check_on_real_data(base, real_slice):
    pytest.importorskip("connectors.datasets.akt")
    data = real_slice
    torch.manual_seed(0)
    model = create("core", n_items=data.n_items, n_concepts=data.n_concepts, base=base,
                   base_config=family(base).tiny_config, bias_dim=8, bias_hidden=8)
    fitted = fit(model, data.train, data.valid, TrainConfig(epochs=1, lr=3e-3, device="cpu", progress=False))
    gated = GateData(data.train, data.valid, data.test, fit_result=fitted, n_items=data.n_items,
                     n_concepts=data.n_concepts)
    report = run_gate(model, gated, GateConfig(**CI_CONFIG))
    assert report.passed, report.table()
    applicable = {c.name for c in report.checks if c.status != "n/a"}
    assert {"future_perturbation", "random_labels", "short_history", "selection_on_valid"} <= applicable, \
        report.table()
