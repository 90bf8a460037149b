"""The docs' examples run: docs/api.md's doctest blocks, and every script in docs/examples/ on a small stand-in
for the data set they name (simulated learners in AKT's split files, under a data root of the test's own), with
one thread; and the notebook on the real data set when it is there."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ktstream
from tests.conftest import require_dataset

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))


def run_example(script: Path, *args: str, data_root: Path | None = None) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if data_root is not None:
        env["KTSTREAM_DATA"] = str(data_root)
    done = subprocess.run([sys.executable, str(script), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory) -> Path:
    """A data root whose assist2009_akt_pid holds 80 simulated learners as fold 1 of AKT's format (index,user /
    problems / skills / responses)."""
    root = tmp_path_factory.mktemp("data")
    folder = root / "assist2009_akt_pid"
    folder.mkdir()
    events = ktstream.simulate(n_learners=80, mean_length=25, seed=0)
    by_learner = ktstream.Dataset.of(events)
    parts = {"train1": range(0, 56), "valid1": range(56, 64), "test1": range(64, 80)}
    for part, which in parts.items():
        lines = []
        for i in which:
            recs = by_learner.learner(f"u{i}")
            lines += [f"{i},u{i}", ",".join(r["item_id"][1:] for r in recs),
                      ",".join(r["concept_ids"][0][1:] for r in recs), ",".join(str(r["response"]) for r in recs)]
        (folder / f"assist2009_pid_{part}.csv").write_text("\n".join(lines) + "\n")
    return root


def test_the_api_page_runs():
    failed, tried = doctest.testfile(str(ROOT / "docs" / "api.md"), module_relative=False,
                                     optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert tried > 20 and failed == 0


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script, toy_root, tmp_path):
    pytest.importorskip("pandas")
    out = run_example(script, "assist2009_akt_pid", str(tmp_path), data_root=toy_root)
    if script.stem == "notebook":
        assert "Evaluation(n=" in out and "saved and loaded Trained('dkt'" in out
        assert ktstream.load(tmp_path).vocab.probes
    if script.stem == "mastery_curves":
        assert (tmp_path / "mastery.png").stat().st_size > 1000


@pytest.mark.slow
def test_the_notebook_on_the_real_data_set(tmp_path):
    require_dataset("assist2009_akt_pid")
    out = run_example(ROOT / "docs" / "examples" / "notebook.py", "assist2009_akt_pid", str(tmp_path))
    assert "Evaluation(n=" in out
