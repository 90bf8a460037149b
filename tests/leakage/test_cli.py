"""`ktstream check-leakage` end to end on small event files: exit 0 and a JSON report when clean,
exit 1 naming the check when the test file repeats the training learners."""

from __future__ import annotations

import json

import pytest

from ktstream.cli.main import main
from ktstream.data.eventlog import write_jsonl
from ktstream.data.simulate import simulate


@pytest.fixture
def files(tmp_path):
    recs = simulate(n_learners=60, n_items=30, n_concepts=5, mean_length=30, seed=2)
    part = lambda r: int(r["learner_id"][1:]) % 6  # noqa: E731
    paths = {}
    for name, keep in (("train", {0, 1, 2, 3}), ("valid", {4}), ("test", {5})):
        paths[name] = tmp_path / f"{name}.jsonl"
        write_jsonl([r for r in recs if part(r) in keep], paths[name])
    return paths


def args(files, test, out, *extra):
    return ["check-leakage", "--model", "dkt", "--model-arg", "dim=8", "--model-arg", "hidden=12",
            "--train", str(files["train"]), "--valid", str(files["valid"]), "--test", str(test),
            "--fit-epochs", "1", "--random-label-epochs", "1", "--learners", "4", "-o", str(out), *extra]


def test_clean_files_pass_and_write_a_report(files, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(args(files, files["test"], out)) == 0
    report = json.loads(out.read_text())
    assert report["passed"] and report["model"] == "dkt"
    assert {c["name"]: c["status"] for c in report["checks"]}["selection_on_valid"] == "pass"
    assert "leakage gate for dkt: PASSED" in capsys.readouterr().out


def test_training_learners_in_the_test_file_fail(files, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(args(files, files["train"], out, "--checks", "split_disjoint,repeated_rows")) == 1
    report = json.loads(out.read_text())
    assert report["failed"] == ["split_disjoint"]
    assert "FAILED (split_disjoint)" in capsys.readouterr().out
