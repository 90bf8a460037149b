"""The leakage gate fails sparseKT with the published top-k and DisKT with the published second
softmax, each by every model check named below, and passes the honest families on the same data:
random learners with steps and clocks, and the real-data slice (ASSISTments 2009, AKT's fold 1)."""

from __future__ import annotations

import pytest
import torch

from ktstream.leakage import GateConfig, run_gate
from ktstream.models import create, family
from tests.leakage.leaky_diskt import LeakyDisKT
from tests.leakage.leaky_sparsekt import LeakySparseKT
from tests.leakage.caught import MODEL_CHECKS, assert_caught
from tests.leakage.conftest import N_CONCEPTS, N_ITEMS


# fixture -> (honest family, the checks that must fail on it; each catches it on its own)
FIXTURES = {
    "published_topk": (LeakySparseKT, "sparsekt", MODEL_CHECKS),
    "published_second_softmax": (LeakyDisKT, "diskt", MODEL_CHECKS),
}
# the checks the fixtures must fail on the real-data slice too (no steps, no clocks there: the probe
# synthesises them)
ON_REAL_DATA = ("attention_masking", "future_perturbation")


def _leaky(fixture: str, n_items: int, n_concepts: int):
    cls, base, _ = FIXTURES[fixture]
    torch.manual_seed(0)
    return cls(n_items, n_concepts, **family(base).tiny_config)


def _honest(name: str, n_items: int, n_concepts: int, **options):
    torch.manual_seed(0)
    return create(name, n_items=n_items, n_concepts=n_concepts, **{**family(name).tiny_config, **options})


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_published_version_fails_the_gate(fixture, random_learners):
    assert_caught(_leaky(fixture, N_ITEMS, N_CONCEPTS), random_learners, FIXTURES[fixture][2], fixture)


@pytest.mark.parametrize("name, options", [("sparsekt", {}), ("sparsekt", {"sparse": "soft", "threshold": 0.5}),
                                           ("diskt", {}), ("diskt", {"contradiction": 0.5})])
def test_honest_version_passes_the_same_checks(name, options, random_learners):
    """DisKT with a threshold of 0.5 flags some interactions even untrained (the flag path is exercised)."""
    report = run_gate(_honest(name, N_ITEMS, N_CONCEPTS, **options), random_learners,
                      GateConfig(checks=MODEL_CHECKS, max_length=40))
    assert report.passed, report.table()
    assert report["attention_masking"].status == "pass"


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_on_the_real_slice_the_published_version_fails_and_the_honest_one_passes(fixture, real_slice):
    data, config = real_slice, GateConfig(checks=ON_REAL_DATA, max_length=60)
    leaky = run_gate(_leaky(fixture, data.n_items, data.n_concepts), data, config)
    for check in ON_REAL_DATA:
        assert leaky[check].status == "fail", f"{fixture} not caught by {check} on real data:\n{leaky.table()}"
    honest = run_gate(_honest(FIXTURES[fixture][1], data.n_items, data.n_concepts), data, config)
    assert all(honest[c].status == "pass" for c in ON_REAL_DATA), honest.table()
