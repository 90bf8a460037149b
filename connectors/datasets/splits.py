"""Where the benchmark data sets live, and their own train/valid/test files.

Published results on the DKVMN-era benchmarks are tied to the split files the
authors shipped (a fixed ``train``/``test`` pair, and ``train{k}``/``valid{k}``
cross-validation folds; AKT's ``train{k}``/``valid{k}``/``test{k}``). Training
and evaluation code asks this module for those files instead of guessing
names, and finds the data root the same way everywhere (tests included).

Note that these splits are by learner, with no time cut-off: they serve
comparisons with published numbers. Time-ordered evaluation (invariant 5) needs
timestamped data (EdNet KT1, DataShop).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# Data set folders we hold -> the converter format that reads them.
DATASET_FORMATS = {
    "assist2009_akt_pid": "akt",
    "assist2009_skillbuilder_raw_2skills": "assistments-raw",
    "cognitive_tutor_algebra_subset": "datashop",
    "dkt_assistments2009_builder": "dkt-csv",
    "dkt_synthetic5": "dkt-synthetic",
    "dkvmn_assist2009_updated": "dkvmn",
    "dkvmn_assist2015": "dkvmn",
    "dkvmn_statics2011": "dkvmn",
    "ednet_kt1_11users": "ednet-kt1",
    "fsai_f1tof3": "dkvmn",
}

_SPLIT_FILE = re.compile(r"^(?P<prefix>.+?)_(?P<part>train|valid|test)(?P<k>\d*)\.csv$")


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The folder holding the data sets: `root`, else ``$KTSTREAM_DATA``, else ``../shared/data`` beside the repo."""
    if root is not None:
        return Path(root)
    env = os.environ.get("KTSTREAM_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def dataset_dir(name: str, root: str | os.PathLike | None = None) -> Path:
    """The folder of data set `name`; FileNotFoundError (naming the path and the variable) if absent."""
    path = data_root(root) / name
    if not path.is_dir():
        raise FileNotFoundError(f"data set {name!r} not found: {path}; set KTSTREAM_DATA to the folder holding it")
    return path


@dataclass(frozen=True)
class Fold:
    """One cross-validation fold of a data set's own split files."""

    k: int
    train: Path
    valid: Path | None = None
    test: Path | None = None


@dataclass(frozen=True)
class SplitFiles:
    """A data set's own split files.

    Attributes
    ----------
    train, test
        The fixed split (DKVMN, DKT, FSAI), or None.
    folds
        ``train{k}`` with ``valid{k}`` (and AKT's ``test{k}``), ordered by k.
    """

    dataset: str
    train: Path | None
    test: Path | None
    folds: tuple[Fold, ...]

    @property
    def whole(self) -> tuple[Path, ...]:
        """Files that together hold every learner exactly once.

        The fixed train + test where there is one (the CV files are cut from
        train); else the first fold's train + valid + test (AKT: valid{k} is
        test{k+1}, so those three cover all five parts).
        """
        if self.train is not None and self.test is not None:
            return (self.train, self.test)
        if self.folds:
            f = self.folds[0]
            return tuple(p for p in (f.train, f.valid, f.test) if p is not None)
        return ()


def split_files(name: str, root: str | os.PathLike | None = None) -> SplitFiles:
    """Find the split files (``<prefix>_{train,valid,test}[k].csv``) of data set `name`.

    A folder without such files (raw logs, EdNet, DataShop, Synthetic-5) gives
    an empty `SplitFiles`.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "toy").mkdir()
    >>> for n in ("toy_train.csv", "toy_test.csv", "toy_train1.csv", "toy_valid1.csv"):
    ...     _ = (root / "toy" / n).write_text("")
    >>> s = split_files("toy", root)
    >>> s.train.name, s.test.name, [(f.k, f.train.name, f.valid.name) for f in s.folds]
    ('toy_train.csv', 'toy_test.csv', [(1, 'toy_train1.csv', 'toy_valid1.csv')])
    """
    folder = dataset_dir(name, root)
    fixed: dict[str, Path] = {}
    parts: dict[int, dict[str, Path]] = {}
    for path in sorted(folder.iterdir()):
        m = _SPLIT_FILE.match(path.name)
        if not m:
            continue
        if m["k"]:
            parts.setdefault(int(m["k"]), {})[m["part"]] = path
        else:
            fixed[m["part"]] = path
    folds = tuple(Fold(k, p["train"], p.get("valid"), p.get("test")) for k, p in sorted(parts.items()) if "train" in p)
    return SplitFiles(name, fixed.get("train"), fixed.get("test"), folds)
