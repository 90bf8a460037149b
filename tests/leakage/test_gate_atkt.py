"""ATKT's original attention (a softmax over every position of the sequence, tests/leakage/leaky_atkt.py)
fails the leakage gate; the registered causal family passes the same checks on the same learners."""

from __future__ import annotations

import pytest
import torch

from ktstream.leakage import GateConfig, run_gate
from ktstream.models import create, family
from tests.leakage.leaky_atkt import OriginalATKT
from tests.leakage.caught import MODEL_CHECKS, assert_caught
from tests.leakage.conftest import N_CONCEPTS, N_ITEMS

TINY = family("atkt").tiny_config

# the checks that must fail on the original design, each on its own: the future and the response at t
# reach a prediction through the normaliser, and its serving path (the causal one) disagrees with it
CAUGHT_BY = ["future_perturbation", "current_label_flip", "serving_equivalence"]


def test_original_atkt_fails_the_gate(random_learners):
    torch.manual_seed(0)
    model = OriginalATKT(N_ITEMS, N_CONCEPTS, **TINY)
    report = assert_caught(model, random_learners, CAUGHT_BY, "original ATKT")
    cases = report["future_perturbation"].extras["per_case"]
    assert all(v > 0 for v in cases.values()), cases  # later responses alone move it, not only the cut


def test_causal_atkt_passes_the_same_checks(random_learners):
    torch.manual_seed(0)
    model = create("atkt", n_items=N_ITEMS, n_concepts=N_CONCEPTS, **TINY)
    report = run_gate(model, random_learners, GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert report.passed, report.table()
    assert report["attention_masking"].status == "pass"


def test_original_atkt_fails_on_the_ci_slice(real_slice):
    pytest.importorskip("connectors.datasets.akt")
    data = real_slice
    torch.manual_seed(0)
    model = OriginalATKT(data.n_items, data.n_concepts, **TINY)
    report = run_gate(model, data, GateConfig(checks=("future_perturbation",), max_length=60))
    assert report["future_perturbation"].status == "fail", report.table()
