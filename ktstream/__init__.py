r"""ktstream: streaming, online knowledge tracing.

The names below are the notebook API (``ktstream.api``; docs/api.md): load a data set, train and
evaluate a model in one call each, trace learners online, read their mastery, save and load. They
are imported on first use (PEP 562), so ``import ktstream`` alone loads neither torch nor pandas.

>>> import re, ktstream
>>> bool(re.fullmatch(r"\d+\.\d+.*", ktstream.__version__))
True
>>> sorted(ktstream.__all__)[:5]
['Dataset', 'Evaluation', 'Predictions', 'Tracer', 'TracerError']
"""

from __future__ import annotations

import importlib
from importlib import metadata
from pathlib import Path
from typing import Any


def _version() -> str:
    """The installed distribution's version; in a source checkout that is not installed, pyproject.toml's."""
    try:
        return metadata.version("ktstream")
    except metadata.PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__ = _version()

#: Public name -> the module that defines it (imported when the name is first read).
_LAZY = {
    "Dataset": "ktstream.api.datasets", "load_dataset": "ktstream.api.datasets",
    "Vocab": "ktstream.api.bundle", "Trained": "ktstream.api.bundle", "save": "ktstream.api.bundle",
    "load": "ktstream.api.bundle",
    "train": "ktstream.api.training", "evaluate": "ktstream.api.training", "predict": "ktstream.api.training",
    "Evaluation": "ktstream.api.training", "Predictions": "ktstream.api.training",
    "Tracer": "ktstream.api.tracer", "TracerError": "ktstream.api.tracer",
    "mastery_trajectory": "ktstream.api.mastery", "Trajectory": "ktstream.api.mastery",
    "simulate": "ktstream.data.simulate",
}
#: Modules reached through ``ktstream.`` names: the data set converters and the Kafka connectors live in the
#: top-level ``connectors`` package (outside the core, as the layers want), re-exported by ``ktstream.api``.
_MODULES = {"api": "ktstream.api", "datasets": "ktstream.api.datasets", "kafka": "ktstream.api.kafka",
            "models": "ktstream.models"}

__all__ = ["__version__", *_LAZY, *_MODULES]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        module = importlib.import_module(_MODULES[name])
    elif name in _LAZY:
        module = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'ktstream' has no attribute {name!r}")
    globals()[name] = module  # later reads skip this function
    return module


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
