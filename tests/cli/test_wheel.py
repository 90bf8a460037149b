"""An installed wheel works without the source tree: the shipped settings files are package data, the demo's
short form and an evaluation of data the test writes itself run from a folder outside the checkout.

The wheel is built from a copy of the packaged sources (no build isolation: no network), installed with
``--no-deps`` into a fresh virtual environment that sees the host's site-packages (torch and the rest
come from there), and every command runs with that environment's ``ktstream`` script, with no
PYTHONPATH, in a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.cli.toy import write_dkvmn

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the venv's ktstream script, an environment without the checkout, a working folder outside it)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("ktstream", "connectors"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KTSTREAM_DATA")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
          base / "dist", src], base, env)
    wheel = next((base / "dist").glob("ktstream-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"ktstream/configs/default.yaml", "ktstream/configs/demo.yaml", "ktstream/cli/main.py",
            "connectors/datasets/splits.py"} <= set(names)
    assert not any(n.startswith(("tests/", "configs/")) for n in names)
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], base, env)
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q",
          wheel], base, env)
    work = base / "work"
    work.mkdir()
    return venv / "bin" / "ktstream", env, work


def test_the_installed_package_is_the_wheel(installed):
    script, env, work = installed
    where = _run([script.parent / "python", "-c", "import ktstream.cli.main as m; print(m.__file__)"], work, env)
    assert where.stdout.strip().startswith(str(script.parents[1])), where.stdout
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _run([script, "--version"], work, env).stdout.strip() == f"ktstream {version}"
    shipped = _run([script, "config-reference", "--yaml"], work, env).stdout
    assert shipped == (ROOT / "ktstream" / "configs" / "default.yaml").read_text()


def test_demo_short_runs_from_the_wheel(installed):
    script, env, work = installed
    done = _run([script, "demo", "--short", "--duration", "60"], work, env, timeout=240)
    final = next(line for line in done.stdout.splitlines() if line.startswith("done:"))
    consumed, total = final.split()[1].split("/")
    assert consumed == total, final


def test_evaluate_own_data_from_the_wheel(installed):
    script, env, work = installed
    data = write_dkvmn(work / "mine")
    _run([script, "evaluate", "benchmark", "--data", data, "--model", "dkt", "--model-arg", "dim=8", "--model-arg",
          "hidden=8", "--epochs", "1", "--threads", "1", "--device", "cpu", "-o", work / "run"], work, env)
    result = json.loads((work / "run" / "results.json").read_text())
    assert result["format"] == "dkvmn" and 0.0 <= result["test"]["auc"] <= 1.0
    assert (work / "run" / "ckpt" / "fit.json").is_file()
