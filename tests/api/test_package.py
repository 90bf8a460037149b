"""The top-level package: __version__, names imported on first use, and `import ktstream` staying light."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import ktstream

ROOT = Path(__file__).resolve().parents[2]


def test_import_ktstream_loads_neither_torch_nor_pandas():
    code = ("import json, sys, ktstream; v = ktstream.__version__\n"
            "print(json.dumps([m for m in ('torch', 'pandas', 'kafka', 'ktstream.api') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_version_is_the_distributions_else_the_checkouts():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    try:
        assert ktstream.__version__ == metadata.version("ktstream") == declared
    except metadata.PackageNotFoundError:
        assert ktstream.__version__ == declared


def test_version_falls_back_to_pyproject(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert ktstream._version() == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_every_public_name_resolves():
    for name in ktstream.__all__:
        assert getattr(ktstream, name) is not None, name
    assert ktstream.Tracer is ktstream.api.Tracer and ktstream.train is ktstream.api.train
    assert set(ktstream.__all__) <= set(dir(ktstream))
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        ktstream.trian
