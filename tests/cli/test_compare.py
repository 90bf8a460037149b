"""`ktstream compare`: the plan is on disk before any test data is read; the table has every column and
its numbers are the per-run figures (means over seeds); timestamped data runs the prequential protocol."""

from __future__ import annotations

import json

import pytest

from ktstream.cli import compare
from ktstream.cli.main import main
from ktstream.scoring.binary import LENGTH_LABELS
from tests.cli.toy import write_dkvmn

TINY = ["--model-arg", "dkt.hidden=8", "--epochs", "1", "--patience", "1", "--threads", "1"]


@pytest.fixture()
def toy(tmp_path):
    return write_dkvmn(tmp_path / "toy", learners=36)


def test_plan_before_test_data_and_table_equals_runs(toy, tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    reads = []
    real_read_test = compare.read_test

    def read_test(*a, **kw):
        plan = json.loads((out / "plan.json").read_text())  # written before the test file is opened
        reads.append(plan)
        return real_read_test(*a, **kw)

    monkeypatch.setattr(compare, "read_test", read_test)
    assert main(["compare", "--models", "dkt", "--data", str(toy), "--format", "dkvmn", "--lr-grid", "0.001,0.01",
                 "--seeds", "2", *TINY, "-o", str(out)]) == 0
    assert len(reads) == 1
    run_plan = reads[0]["runs"][0]
    assert run_plan["lr"] in (0.001, 0.01) and set(run_plan["valid_by_lr"]) == {"0.001", "0.01"}
    assert run_plan["model_config"]["hidden"] == 8
    table = json.loads((out / "table.json").read_text())
    assert table["columns"] == compare.COLUMNS
    (row,) = table["rows"]
    assert set(compare.COLUMNS) <= set(row)
    runs = table["runs"]
    assert [r["seed"] for r in runs] == [0, 1] and row["seeds"] == 2 and row["protocol"] == "benchmark"
    for key in ("test_auc", "auc_first5", "accuracy", "log_loss", "random_label_auc", "cpu_minutes",
                "serve_us_per_event"):
        assert row[key] == pytest.approx(sum(r[key] for r in runs) / 2)
    # the selection run at seed 0 and the table's seed-0 run are one training: the same validation score
    assert runs[0]["best_valid"] == pytest.approx(run_plan["valid_by_lr"][str(run_plan["lr"])], abs=1e-12)
    for r in runs:
        assert r["lr"] == run_plan["lr"] and r["wall_minutes"] > 0
        assert r["auc_overall_recomputed"] == pytest.approx(r["test_auc"], abs=1e-9)
        assert abs(r["random_label_auc"] - 0.5) < 0.25
        assert r["state_bytes_per_learner"] > 0 and r["serve_us_per_event"] > 0
    # more seeds later: --first-seed 1 repeats the run of seed 1, and only it
    more = tmp_path / "more"
    assert main(["compare", "--models", "dkt", "--data", str(toy), "--format", "dkvmn", "--lr", str(run_plan["lr"]),
                 "--seeds", "1", "--first-seed", "1", *TINY, "-o", str(more)]) == 0
    (again,) = json.loads((more / "table.json").read_text())["runs"]
    assert again["seed"] == 1 and again["test_auc"] == pytest.approx(runs[1]["test_auc"], abs=1e-9)
    md = (out / "table.md").read_text()
    assert all(c in md.splitlines()[0] for c in compare.COLUMNS)
    html = (out / "report.html").read_text()
    assert 'id="comparison-table"' in html and "AUC first 5" in html
    assert (out / "plan.json").stat().st_mtime <= (out / "table.json").stat().st_mtime


def test_auc_by_history_length_per_family_is_the_mean_of_its_runs(toy, tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", "--models", "dkt,irt-pfa", "--data", str(toy), "--format", "dkvmn", "--seeds", "2", *TINY,
                 "-o", str(out)]) == 0
    table = json.loads((out / "table.json").read_text())
    labels = LENGTH_LABELS
    assert labels[0] == "1-2" and labels[-1] == ">200"
    rows = {r["model"]: r for r in table["by_history_length"]}
    assert set(rows) == {"dkt", "irt-pfa"}
    for model, row in rows.items():
        runs = [r for r in table["runs"] if r["model"] == model]
        for label in labels:
            aucs = [r["auc_by_history_length"][label]["auc"] for r in runs]
            aucs = [a for a in aucs if a == a]
            if aucs:
                assert row[label] == pytest.approx(sum(aucs) / len(aucs), abs=1e-12)
            else:
                assert row[label] != row[label]  # NaN: no prediction in the bucket
            assert row[f"n {label}"] == runs[0]["auc_by_history_length"][label]["n"]
        assert sum(row[f"n {label}"] for label in labels) == runs[0]["n"]  # every test prediction in one bucket
    assert any(rows["dkt"][label] == rows["dkt"][label] for label in labels[1:])  # not all empty
    md = (out / "table.md").read_text()
    assert "| dataset | model | 1-2 | 3-10 |" in md
    assert md.count("| dkt |") == 2  # the main table and the history-length table
    assert "Test AUC by the position" in (out / "report.html").read_text()


def test_timestamped_events_run_prequential(tmp_path):
    from ktstream.data.eventlog import write_events
    from ktstream.data.simulate import simulate

    events = tmp_path / "events.jsonl"
    write_events(simulate(n_learners=24, mean_length=25, seed=3), events)
    out = tmp_path / "cmp"
    assert main(["compare", "--models", "dkt", "--data", str(events), "--lr-grid", "0.001,0.01", *TINY,
                 "-o", str(out)]) == 0
    table = json.loads((out / "table.json").read_text())
    assert set(table["plan"]["runs"][0]["valid_by_lr"]) == {"0.001", "0.01"}  # chosen on [C1, C0)
    (row,) = table["rows"]
    assert row["protocol"] == "prequential" and row["seeds"] == 1
    assert row["test_auc"] == pytest.approx(table["runs"][0]["auc_overall_recomputed"], abs=1e-9)


def test_a_family_grid_replaces_the_common_grid_for_that_family_only(toy, tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", "--models", "dkt,irt-pfa", "--data", str(toy), "--format", "dkvmn",
                 "--lr-grid", "0.001,0.002", "--lr-grid", "irt-pfa=0.01,0.03", *TINY, "-o", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["budget"]["lr_grid"] == {"dkt": [0.001, 0.002], "irt-pfa": [0.01, 0.03]}
    by_model = {r["model"]: r for r in plan["runs"]}
    assert set(by_model["dkt"]["valid_by_lr"]) == {"0.001", "0.002"}
    assert set(by_model["irt-pfa"]["valid_by_lr"]) == {"0.01", "0.03"}
    runs = {r["model"]: r for r in json.loads((out / "table.json").read_text())["runs"]}
    assert runs["irt-pfa"]["lr"] == by_model["irt-pfa"]["lr"] in (0.01, 0.03)
    # one rate for a family is no selection: that family trains once, at it
    single = tmp_path / "single"
    assert main(["compare", "--models", "dkt,irt-pfa", "--data", str(toy), "--format", "dkvmn",
                 "--lr-grid", "irt-pfa=0.02", *TINY, "-o", str(single)]) == 0
    runs = {r["model"]: r for r in json.loads((single / "plan.json").read_text())["runs"]}
    assert (runs["dkt"]["lr"], runs["irt-pfa"]["lr"]) == (0.001, 0.02)
    assert runs["dkt"]["valid_by_lr"] == runs["irt-pfa"]["valid_by_lr"] == {}


@pytest.mark.parametrize("grids", [["sakt=0.01"], ["0.01,x"], ["0.01,0.01"], ["dkt=0.01", "dkt=0.02"], ["-0.1"],
                                   ["dkt="]])
def test_a_malformed_grid_fails_before_anything_is_read(toy, tmp_path, capsys, grids):
    options = [x for g in grids for x in ("--lr-grid", g)]
    assert main(["compare", "--models", "dkt", "--data", str(toy), "--format", "dkvmn", *options,
                 *TINY, "-o", str(tmp_path / "x")]) == 2
    assert "--lr-grid" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_wrong_names_fail_before_anything_is_read(tmp_path, capsys):
    assert main(["compare", "--models", "dtk", "--datasets", "dkvmn_statics2011", "-o", str(tmp_path / "x")]) == 2
    assert "did you mean 'dkt'" in capsys.readouterr().err
    assert main(["compare", "--models", "dkt", "--model-arg", "sakt.dim=8", "--datasets", "dkvmn_statics2011",
                 "-o", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
