"""The leakage gate catches every known-leaky fixture (each by a named check) and passes every
registered model family on real data (ASSISTments 2009, AKT's fold 1, a few hundred learners)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.leakage import GateConfig, GateData, run_gate
from ktstream.models import create, family, names
from ktstream.training.trainer import TrainConfig, fit
from tests.leakage.leaky_models import LEAKY_MODELS, expanded_rows_data
from tests.leakage.caught import MODEL_CHECKS, assert_caught
from tests.leakage.conftest import N_CONCEPTS, N_ITEMS


# fixture -> the checks that must fail on it (each one catches it on its own)
CAUGHT_BY = {
    "pooled_routing": ["future_perturbation", "serving_equivalence"],
    "second_softmax": ["attention_masking", "future_perturbation", "batch_independence"],
    "topk_resoftmax": ["attention_masking", "future_perturbation"],
    "peeking_lstm": ["current_label_flip", "future_perturbation", "serving_equivalence"],
    "step_mate_responses": ["future_perturbation", "serving_equivalence"],
    "next_event_time": ["future_perturbation", "serving_equivalence"],
}

# the four leaky designs that must fail on the default CI slice (no clocks, no steps, short learners), by the
# check that must catch each; the last two passed the gate when it probed the data as given
ON_THE_CI_SLICE = {
    "pooled_routing": "future_perturbation",
    "second_softmax": "attention_masking",
    "step_mate_responses": "serving_equivalence",
    "next_event_time": "future_perturbation",
}


@pytest.mark.parametrize("fixture", sorted(CAUGHT_BY))
def test_leaky_model_fails_the_gate(fixture, random_learners):
    torch.manual_seed(0)
    model = LEAKY_MODELS[fixture](N_ITEMS, N_CONCEPTS)
    assert_caught(model, random_learners, CAUGHT_BY[fixture], fixture)


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_an_honest_model_passes_the_model_checks_in_both_precisions(precision, random_learners):
    torch.manual_seed(0)
    model = create("dkt", n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family("dkt").tiny_config)
    report = run_gate(model, random_learners, GateConfig(checks=MODEL_CHECKS, precision=precision))
    assert report.passed, report.table()
    assert report["attention_masking"].status == "n/a"
    if precision == "fp64":  # bit-for-bit where the batch shape is unchanged
        cases = report["future_perturbation"].extras["per_case"]
        assert all(v == 0.0 for c, v in cases.items() if not c.endswith("cut after t")), cases


def _expanded_data(rng, merged: bool) -> GateData:
    def learners(n, prefix):
        hs = expanded_rows_data(rng, n, 40, prefix=prefix)
        return [merge_rows(h) for h in hs] if merged else hs
    return GateData(learners(300, "tr"), learners(80, "va"), learners(150, "te"))


def merge_rows(h):
    """Fold each run of expanded rows into one interaction carrying all its concepts (what the akt converter does)."""
    from ktstream.leakage import interaction_groups

    first = np.unique(interaction_groups(h))
    groups = interaction_groups(h)
    conc = np.zeros((len(first), 3), dtype=np.int64)
    for k, f in enumerate(first):
        cs = h.concepts[groups == f, 0]
        conc[k, : len(cs)] = cs
    return type(h)(h.learner_id, h.items[first], conc, h.responses[first], h.times[first],
                   np.arange(len(first)), [h.event_ids[i] for i in first])


DATA_CHECKS = ("random_labels", "repeated_rows", "one_prediction_per_interaction")
DATA_CONFIG = dict(checks=DATA_CHECKS, random_label_epochs=2, random_label_lr=1e-2)


def test_expanded_rows_fail_random_labels_and_the_data_check():
    torch.manual_seed(0)
    data = _expanded_data(np.random.default_rng(1), merged=False)
    model = create("dkt", n_items=N_ITEMS, n_concepts=10, dim=16, hidden=32, dropout=0.0)
    report = run_gate(model, data, GateConfig(**DATA_CONFIG))
    rl = report["random_labels"]
    assert rl.status == "fail" and rl.figure - 0.5 > rl.bound, report.table()
    assert report["repeated_rows"].status == "fail" and report["repeated_rows"].figure > 0.3
    assert report["one_prediction_per_interaction"].status == "fail"
    assert report.labels["data"].startswith("rows as given")


@pytest.mark.parametrize("merged", [False, True])
def test_the_data_label_is_the_same_whether_or_not_the_repeated_rows_check_ran(merged):
    """The label reuses the check's count when it ran, and counts the rows itself when it did not."""
    data = _expanded_data(np.random.default_rng(1), merged=merged)
    model = create("dkt", n_items=N_ITEMS, n_concepts=10, dim=16, hidden=32, dropout=0.0)
    with_check = run_gate(model, data, GateConfig(checks=["repeated_rows"]))
    without = run_gate(model, data, GateConfig(checks=["split_disjoint"]))
    assert with_check.labels == without.labels
    assert with_check.labels["data"].startswith("question-level" if merged else "rows as given")


def test_the_same_questions_merged_pass_random_labels():
    torch.manual_seed(0)
    data = _expanded_data(np.random.default_rng(1), merged=True)
    model = create("dkt", n_items=N_ITEMS, n_concepts=10, dim=16, hidden=32, dropout=0.0)
    report = run_gate(model, data, GateConfig(**DATA_CONFIG))
    assert report.passed, report.table()
    assert report["repeated_rows"].figure == 0.0 and report.labels["data"].startswith("question-level")


# the defaults otherwise (8 learners, 4 positions); probe histories of 60..81 positions cross the tiny models'
# receptive fields (at most 16) and the path chunk (16) several times, and keep the run quick
CI_CONFIG = dict(random_label_epochs=2, max_length=60)


@pytest.mark.parametrize("name", names())
def test_registered_model_passes_every_check_on_real_data(name, real_slice):
    data = real_slice
    torch.manual_seed(0)
    model = create(name, n_items=data.n_items, n_concepts=data.n_concepts, **family(name).tiny_config)
    fitted = fit(model, data.train, data.valid, TrainConfig(epochs=1, lr=3e-3, device="cpu", progress=False))
    gated = GateData(data.train, data.valid, data.test, fit_result=fitted, n_items=data.n_items,
                     n_concepts=data.n_concepts)
    report = run_gate(model, gated, GateConfig(**CI_CONFIG))
    assert report.passed, report.table()
    applicable = {c.name for c in report.checks if c.status != "n/a"}
    assert {"future_perturbation", "random_labels", "short_history", "selection_on_valid"} <= applicable, \
        report.table()


@pytest.mark.parametrize("fixture", sorted(ON_THE_CI_SLICE))
def test_leaky_model_fails_on_the_ci_slice(fixture, real_slice):
    """The slice has no clocks, no steps and learners of at most 150 rows: the probe must lengthen the
    histories and give them steps and clocks, or a step or time leak goes unseen."""
    check = ON_THE_CI_SLICE[fixture]
    torch.manual_seed(0)
    model = LEAKY_MODELS[fixture](real_slice.n_items, real_slice.n_concepts)
    report = run_gate(model, real_slice, GateConfig(checks=(check,), max_length=60))
    assert report[check].status == "fail", f"{fixture} not caught by {check}:\n{report.table()}"
    assert "synthesised" in report.labels["probe"], report.labels


def _windowed_families() -> list[str]:
    from ktstream.models.windowed import WindowedKT

    return [n for n in names() if issubclass(family(n), WindowedKT)]


def _windowed_positions() -> list[tuple[str, str]]:
    """Each windowed family with each position variant it takes (``attention.POSITIONS``; the default alone
    for a family without the option)."""
    import inspect

    from ktstream.models.attention import POSITIONS

    return [(n, p) for n in _windowed_families()
            for p in (POSITIONS if "position" in inspect.signature(family(n)).parameters else ("monotonic",))]


@pytest.mark.parametrize("name,position", _windowed_positions())
def test_attention_options_pass_the_model_checks(name, position, random_learners):
    """Head routing and the time-decay relation (on histories with clocks and steps) stay causal, with
    every position variant."""
    torch.manual_seed(0)
    options = {"heads": 4, "shared_heads": 1, "routed_topk": 2, "time_decay": True, "relation_dim": 4,
               **({"position": position} if position != "monotonic" else {})}
    model = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **{**family(name).tiny_config, **options})
    report = run_gate(model, random_learners, GateConfig(checks=MODEL_CHECKS, max_length=60))
    assert report.passed, report.table()
    assert report["attention_masking"].status == "pass" and len(report["attention_masking"].extras["maps"]) >= 1
