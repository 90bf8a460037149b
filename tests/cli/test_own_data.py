"""Data of one's own: a folder of split files in a known format is evaluated with ``--data PATH``, its
format detected from the files; the run folder ``evaluate -o`` writes holds everything
``check-leakage --run`` and ``report`` read, so the gate sees what model selection read."""

from __future__ import annotations

import json

import pytest

from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.splits import detect_format, split_files_at, stream_inputs
from ktstream.cli.main import main
from tests.cli.toy import write_dkvmn

TINY = ["--model", "dkt", "--model-arg", "dim=8", "--model-arg", "hidden=8", "--epochs", "2", "--threads", "1",
        "--device", "cpu"]


def test_format_detection(tmp_path):
    write_dkvmn(tmp_path / "dkvmn")
    write_dkvmn(tmp_path / "plain", concept_map=False)
    (tmp_path / "akt").mkdir()
    (tmp_path / "akt" / "x_train1.csv").write_text("1,900\n5,5\n7,9\n1,1\n")
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "export.txt").write_text("Row\tAnon Student Id\tCorrect First Attempt\n1\ts\t1\n")
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "train.jsonl").write_text("")
    assert [detect_format(tmp_path / n) for n in ("dkvmn", "akt", "ds", "events")] == \
        ["dkvmn", "akt", "datashop", "events"]
    assert detect_format(tmp_path / "events" / "train.jsonl") == "events"
    with pytest.raises(DatasetFormatError, match="looks like dkvmn or dkt-csv.*give --format"):
        detect_format(tmp_path / "plain")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFormatError, match="no known format recognised.*akt, assistments-raw"):
        detect_format(tmp_path / "empty")
    files = split_files_at(tmp_path / "dkvmn")
    assert (files.train.name, files.test.name, files.folds) == ("toy_train.csv", "toy_test.csv", ())
    assert [p.name for p in stream_inputs(tmp_path / "dkvmn", "dkvmn")] == ["toy_train.csv", "toy_test.csv"]
    for name in ("valid.jsonl", "test.jsonl", "predictions.parquet"):
        (tmp_path / "events" / name).write_text("")
    assert [p.name for p in stream_inputs(tmp_path / "events", "events")] == ["test.jsonl", "train.jsonl",
                                                                            "valid.jsonl"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("own")
    data = write_dkvmn(base / "mine")
    out = base / "run"
    assert main(["evaluate", "benchmark", "--data", str(data), *TINY, "-o", str(out)]) == 0
    return out


def test_evaluate_reads_own_split_files_and_writes_the_run_folder(run):
    result = json.loads((run / "results.json").read_text())
    assert result["format"] == "dkvmn" and result["dataset"].endswith("mine") and result["protocol"] == "benchmark"
    assert result["counts"]["test_learners"] == 6 and result["counts"]["train_learners"] + \
        result["counts"]["valid_learners"] == 30
    for name in ("results.md", "ckpt/config.json", "ckpt/weights.safetensors", "ckpt/fit.json", "train.parquet",
                 "valid.parquet", "test.parquet"):
        assert (run / name).is_file(), name
    assert json.loads((run / "ckpt" / "fit.json").read_text())["best_epoch"] == result["fit"]["best_epoch"]


def test_check_leakage_takes_the_run_folder(run, capsys):
    """With the run's fit.json the gate checks model selection (it was N/A without one)."""
    out = run / "gate.json"
    code = main(["check-leakage", "--run", str(run), "--checks", "split_disjoint,selection_on_valid,vocab_from_train",
                 "-o", str(out)])
    report = json.loads(out.read_text())
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status == {"split_disjoint": "pass", "selection_on_valid": "pass", "vocab_from_train": "pass"}, \
        capsys.readouterr().out
    assert code == 0


def test_report_reads_the_run_folder(run):
    html = run / "report.html"
    assert main(["report", str(run / "results.json"), "--checkpoint", str(run / "ckpt"), "-o", str(html)]) == 0
    text = html.read_text()
    assert "No per-prediction data" not in text and "No model and events given" not in text


def test_train_reads_own_data(tmp_path, capsys):
    data = write_dkvmn(tmp_path / "mine")
    assert main(["train", "--data", str(data), "--format", "dkvmn", *TINY, "-o", str(tmp_path / "ckpt")]) == 0
    assert (tmp_path / "ckpt" / "fit.json").is_file() and "saved" in capsys.readouterr().out


def test_convert_sorts_a_datashop_export_within_the_memory_limit_it_is_given(tmp_path, capsys, monkeypatch):
    """--memory-limit reaches the sort of the rows by learner (DuckDB's memory_limit); a size it cannot read
    is a usage error before any input is read, and a format without the sort refuses the option."""
    import connectors.datasets.sorted_rows as sorted_rows

    limits = []
    original = sorted_rows.SortedRows.__init__
    monkeypatch.setattr(sorted_rows.SortedRows, "__init__",
                        lambda self, schema, memory_limit, *a, **k: limits.append(memory_limit) or
                        original(self, schema, memory_limit, *a, **k))
    header = ("Row\tAnon Student Id\tProblem Name\tStep Name\tStep Start Time\tFirst Transaction Time\t"
              "Correct First Attempt\tIncorrects\tHints\tCorrects\tKC(Default)\n")
    rows = "".join(f"{i}\ts{i % 3}\tP{i % 4}\tR1\t\t2006-10-26 09:{50 - i:02d}:00.0\t{i % 2}\t0\t0\t1\tK{i % 2}\n"
                   for i in range(1, 13))
    (tmp_path / "steps.txt").write_text(header + rows, encoding="utf-8")
    out = tmp_path / "steps.jsonl"
    assert main(["convert", "datashop", str(tmp_path / "steps.txt"), "-o", str(out), "--memory-limit", "64MB"]) == 0
    assert limits == ["64MB"]
    events = [json.loads(line) for line in out.read_text().splitlines()]
    learners = [e["learner_id"] for e in events]  # each learner's events together, in order of first appearance
    assert len(events) == 12 and learners == ["s1"] * 4 + ["s2"] * 4 + ["s0"] * 4
    for learner in {e["learner_id"] for e in events}:
        times = [e["event_time"] for e in events if e["learner_id"] == learner]
        assert times == sorted(times)
    capsys.readouterr()
    assert main(["convert", "datashop", str(tmp_path / "steps.txt"), "-o", str(out), "--memory-limit", "lots"]) == 2
    assert "--memory-limit takes a size such as 512MB" in capsys.readouterr().err
    write_dkvmn(tmp_path / "toy")
    assert main(["convert", "dkvmn", str(tmp_path / "toy" / "toy_train.csv"), "-o", str(out),
                 "--memory-limit", "1GB"]) == 1
    assert "takes no option ['memory_limit']" in capsys.readouterr().err
