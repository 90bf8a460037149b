"""Every position variant of the attention families passes every leakage-gate check on real data
(ASSISTments 2009, AKT's fold 1, a few hundred learners), as the default (monotonic) variant does in
tests/leakage/test_gate.py: relative buckets, ALiBi and AKT's context-aware distance."""

from __future__ import annotations

import itertools

import pytest
import torch

from ktstream.leakage import GateConfig, GateData, run_gate
from ktstream.models import create, family
from ktstream.models.attention import POSITIONS
from ktstream.training.trainer import TrainConfig, fit

CI_CONFIG = dict(random_label_epochs=2, max_length=60)  # as test_gate.py's real-data test


@pytest.mark.slow
@pytest.mark.parametrize("name,position", itertools.product(["sakt", "simplekt", "akt"],
                                                            [p for p in POSITIONS if p != "monotonic"]))
def test_position_variant_passes_every_check_on_real_data(name, position, real_slice):
    data = real_slice
    torch.manual_seed(0)
    model = create(name, n_items=data.n_items, n_concepts=data.n_concepts,
                   **{**family(name).tiny_config, "position": position})
    fitted = fit(model, data.train, data.valid, TrainConfig(epochs=1, lr=3e-3, device="cpu", progress=False))
    gated = GateData(data.train, data.valid, data.test, fit_result=fitted, n_items=data.n_items,
                     n_concepts=data.n_concepts)
    report = run_gate(model, gated, GateConfig(**CI_CONFIG))
    assert report.passed, report.table()
    applicable = {c.name for c in report.checks if c.status != "n/a"}
    assert {"future_perturbation", "random_labels", "short_history", "selection_on_valid",
            "attention_masking"} <= applicable, report.table()
