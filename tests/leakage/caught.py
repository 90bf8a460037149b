"""The assertion every leaky-fixture test makes: the gate fails the model, and each named check fails on
its own (with the figure past its bound where the check has one)."""

from __future__ import annotations

from ktstream.leakage import GateConfig, run_gate

MODEL_CHECKS = ("future_perturbation", "current_label_flip", "batch_independence", "serving_equivalence",
                "attention_masking")  # path_equivalence has tests of its own (test_paths.py)


def assert_caught(model, data, checks, what: str, gate_checks=MODEL_CHECKS, max_length: int = 40):
    """Run the gate's ``gate_checks`` on ``model``; every check in ``checks`` must fail. Returns the report."""
    report = run_gate(model, data, GateConfig(checks=gate_checks, max_length=max_length))
    assert not report.passed, report.table()
    for check in checks:
        assert report[check].status == "fail", f"{what} not caught by {check}:\n{report.table()}"
        assert report[check].figure is None or report[check].figure > report[check].bound, report.table()
    return report
