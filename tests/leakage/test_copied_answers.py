"""Copied answers without problem ids: found by the pattern they leave or by the file's fingerprint, and
warned about in the CLI output, results.json and the HTML report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ktstream.cli.main import main
from ktstream.data.eventlog import write_jsonl
from ktstream.data.histories import LearnerHistory
from ktstream.leakage import GateConfig, GateData, copied_answer_rows, repeated_rows
from ktstream.leakage.expansion import repeated_rows_check
from tests.conftest import require_dataset
from tests.leakage.leaky_models import expanded_rows_data
from tests.leakage.test_gate import merge_rows


def _without_problem_ids(h: LearnerHistory) -> LearnerHistory:
    """The DKVMN format: each row's "item" is its skill."""
    return LearnerHistory(h.learner_id, h.concepts[:, 0].copy(), h.concepts, h.responses, h.times, h.step_start,
                          h.event_ids)


@pytest.fixture(scope="module")
def expanded():
    # about as many skills as ASSISTments 2009, so that two problems rarely share a pair of skills
    return expanded_rows_data(np.random.default_rng(3), 200, 40, n_items=100, n_concepts=60)


def test_copied_answers_of_co_tagged_skills_are_found_without_problem_ids(expanded):
    truth = sum(len(h) - len(merge_rows(h)) for h in expanded)
    skills_only = [_without_problem_ids(h) for h in expanded]
    repeats, rows = repeated_rows(skills_only)
    assert repeats / rows > 0.2 and repeats <= truth * 1.05, (repeats, truth, rows)
    check = repeated_rows_check(GateData(test=skills_only), GateConfig())
    assert check.status == "fail" and check.extras["label"].startswith("rows as given")


def test_consecutive_answers_of_different_skills_agreeing_by_chance_are_not_flagged(expanded):
    merged = [merge_rows(h) for h in expanded]  # one row per problem, its skills together: nothing copied
    assert all(not c.any() for c in copied_answer_rows(merged))
    one_skill = [_without_problem_ids(h) for h in merged]  # each problem reduced to its first skill
    assert all(not c.any() for c in copied_answer_rows(one_skill))


def _events(histories, expand: bool):
    """Canonical records of the fixture's learners (no problem ids: item = skill), one minute apart."""
    out = []
    for h in histories:
        h = h if expand else merge_rows(h)
        for t in range(len(h)):
            skill = f"s{h.concepts[t, 0]}"
            out.append({"event_id": f"{h.learner_id}-{t}", "learner_id": h.learner_id, "item_id": skill,
                        "concept_ids": [skill], "response": int(h.responses[t]),
                        "event_time": 1_700_000_000_000 + 60_000 * (t + 1000 * int(h.learner_id[1:]))})
    return out


@pytest.mark.parametrize("expand", [True, False])
def test_evaluate_warns_in_its_output_and_results_json(expand, expanded, tmp_path, capsys):
    events = tmp_path / "events.jsonl"
    write_jsonl(_events(expanded, expand), events)
    out = tmp_path / "run"
    assert main(["evaluate", "prequential", "--events", str(events), "--epochs", "1", "--model-arg", "dim=8",
                 "--model-arg", "hidden=8", "--device", "cpu", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    printed = capsys.readouterr().out
    if expand:
        found = result["repeated_answers"]
        assert found["share"] > 0.1 and "may repeat answers" in found["warning"]
        assert "WARNING: figures computed on rows that may repeat answers" in printed
    else:
        assert result["repeated_answers"]["warning"] is None and "WARNING" not in printed


def test_the_html_report_carries_the_warning():
    from ktstream.reports.report import ReportInputs, _comparison

    r = {"model": "dkt", "dataset": "d", "test": {"auc": 0.8}, "repeated_answers": {"warning": "rows may repeat"}}
    html = _comparison(ReportInputs([r, {**r, "repeated_answers": {"warning": None}}]), ["a", "b"])
    assert html.count("rows may repeat") == 1 and 'class="note"' in html


def test_the_dkvmn_copy_of_assistments_2009_is_flagged():
    from connectors.datasets import iter_events
    from connectors.datasets.fingerprints import known_repeated_answers
    from ktstream.cli.evaluate import repeated_answers

    path = require_dataset("dkvmn_assist2009_updated") / "assist2009_updated_test.csv"
    found = repeated_answers(list(iter_events("dkvmn", path)), (path,))
    assert found["rows"] == 101_419 and found["share"] > 0.10, found
    assert known_repeated_answers(path) in found["known_files"] and found["warning"]
