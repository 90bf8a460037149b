"""Where the benchmark data sets live, and their own train/valid/test files.

Published results on the DKVMN-era benchmarks are tied to the split files the
authors shipped (a fixed ``train``/``test`` pair, and ``train{k}``/``valid{k}``
cross-validation folds; AKT's ``train{k}``/``valid{k}``/``test{k}``). Training
and evaluation code asks this module for those files instead of guessing
names, and finds the data root the same way everywhere (tests included).

Note that these splits are by learner, with no time cut-off: they serve
comparisons with published numbers. Time-ordered evaluation (invariant 5) needs
timestamped data (EdNet KT1, DataShop).

Data sets of your own are a folder (or a file) in one of the converters'
formats, or canonical event logs: `detect_format` names the format from the
files where that is unambiguous, `split_files_at` finds split files in any
folder, and `stream_inputs` the files that together hold a whole stream.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from connectors.datasets.exceptions import DatasetFormatError, DatasetNotFoundError

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

#: Formats whose records carry event times (the time-ordered protocol needs them).
TIMESTAMPED_FORMATS = ("datashop", "ednet-kt1")
#: Canonical event logs (`ktstream convert`'s output): a file, or a folder of train/valid/test logs.
EVENTS = "events"
EVENT_SUFFIXES = (".jsonl", ".parquet")

_SPLIT_FILE = re.compile(r"^(?P<prefix>.+?)_(?P<part>train|valid|test)(?P<k>\d*)\.csv$")
_EVENTS_SPLIT = re.compile(r"^(?P<part>train|valid|test)(?P<k>\d*)\.(jsonl|parquet)$")


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The folder holding the data sets: `root`, else ``$KTSTREAM_DATA``, else ``../shared/data`` beside a
    source checkout, else (an installed package) ``~/.ktstream/data``."""
    if root is not None:
        return Path(root)
    env = os.environ.get("KTSTREAM_DATA")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file():
        return checkout.parent / "shared" / "data"
    return Path.home() / ".ktstream" / "data"


def dataset_dir(name: str, root: str | os.PathLike | None = None) -> Path:
    """The folder of data set `name`; `DatasetNotFoundError` (a FileNotFoundError naming the path and the
    variable) if absent."""
    path = data_root(root) / name
    if not path.is_dir():
        raise DatasetNotFoundError(f"data set {name!r} not found: {path}; set KTSTREAM_DATA to the folder holding "
                                   f"it (or give your own copy with --data PATH)")
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
    return split_files_at(dataset_dir(name, root), name)


def split_files_at(folder: str | os.PathLike, name: str | None = None) -> SplitFiles:
    """The split files (``<prefix>_{train,valid,test}[k].<ext>``) in any folder; canonical logs
    (``train.jsonl``, ``valid.parquet``, ...: what ``ktstream evaluate --out`` writes) count as well."""
    folder = Path(folder)
    fixed: dict[str, Path] = {}
    parts: dict[int, dict[str, Path]] = {}
    for path in sorted(folder.iterdir()):
        m = _SPLIT_FILE.match(path.name) or _EVENTS_SPLIT.match(path.name)
        if not m:
            continue
        if m["k"]:
            parts.setdefault(int(m["k"]), {})[m["part"]] = path
        else:
            fixed[m["part"]] = path
    folds = tuple(Fold(k, p["train"], p.get("valid"), p.get("test")) for k, p in sorted(parts.items()) if "train" in p)
    return SplitFiles(name or folder.name, fixed.get("train"), fixed.get("test"), folds)


def _head(path: Path, lines: int = 2) -> list[str]:
    """The first non-empty lines of a text file (a few kB at most)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            text = fh.read(8192)
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip()][:lines]


def _header_format(path: Path) -> str | None:
    """The format a file's header names (column names: raw ASSISTments, DataShop, EdNet KT1), if any."""
    head = _head(path, 1)
    if not head:
        return None
    columns = {c.strip().lower() for c in re.split(r"[\t,]", head[0])}
    if {"anon student id", "correct first attempt"} <= columns:
        return "datashop"
    if {"order_id", "user_id", "problem_id", "correct"} <= columns:
        return "assistments-raw"
    if {"timestamp", "question_id", "user_answer"} <= columns:
        return "ednet-kt1"
    return None


def _lines_format(path: Path) -> str | None:
    """The format of a learner-block file by its first two lines: AKT's first line is
    ``index,user_id``; a DKVMN / DKT-paper block's is one number (the two cannot be told apart: None)."""
    head = _head(path, 2)
    if len(head) < 2:
        return None
    first = [v for v in head[0].split(",") if v.strip()]
    if len(first) == 2 and all(v.strip().isdigit() for v in first):
        return "akt"
    return None


def detect_format(path: str | os.PathLike) -> str:
    """The format of a data file or folder, when its files say so unambiguously; otherwise a
    `DatasetFormatError` saying what was found and which formats there are.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "toy_train1.csv").write_text("1,900\\n5,5\\n7,9\\n1,1\\n")
    >>> detect_format(folder), detect_format(folder / "toy_train1.csv")
    ('akt', 'akt')
    """
    from connectors.datasets import CONVERTERS

    path = Path(path)
    if not path.exists():
        raise DatasetNotFoundError(f"no such file or folder: {path}")
    if path.is_file() and path.suffix in EVENT_SUFFIXES:
        return EVENTS
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    if path.is_dir() and any(p.suffix in EVENT_SUFFIXES and _EVENTS_SPLIT.match(p.name) for p in files):
        return EVENTS
    info = path / "info"
    if path.is_dir() and info.is_dir() and any(p.name.endswith("_info.txt") for p in info.iterdir()):
        return "dkt-synthetic"
    found = {f for p in files if p.suffix.lower() in (".csv", ".txt", ".tsv") and (f := _header_format(p))}
    splits = [p for p in files if _SPLIT_FILE.match(p.name)]
    if not found and splits:
        from connectors.datasets.concept_maps import find_concept_map

        # 3-line blocks: DKVMN's copies carry a question -> concept map beside them, the DKT paper's none
        three = "dkvmn" if find_concept_map(splits[0]) is not None else "dkvmn or dkt-csv"
        found = {_lines_format(splits[0]) or three}
    elif not found and path.is_file():
        found = {f for f in (_lines_format(path),) if f}
    if len(found) == 1 and " or " not in next(iter(found)):
        return found.pop()
    what = f"it looks like {' or '.join(sorted(found))}" if found else "no known format recognised"
    raise DatasetFormatError(f"cannot tell the format of {path} ({what}); give --format, one of "
                             f"{', '.join(sorted([*CONVERTERS, EVENTS]))}")


def stream_inputs(path: str | os.PathLike, format: str) -> list[Path]:
    """The files of `path` that together hold its whole stream, read as `format`: a file is itself; a
    folder of split files its `SplitFiles.whole`; an EdNet folder the folder; else the folder's files
    whose header names `format` (DataShop, raw ASSISTments) or its ``*.csv`` (Synthetic-5)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if format == "ednet-kt1":
        return [path]
    if format == EVENTS:  # canonical logs: a run folder's train, valid and test, else every log in the folder
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in EVENT_SUFFIXES)
        files = [p for p in files if _EVENTS_SPLIT.match(p.name)] or files
        if not files:
            raise DatasetFormatError(f"no .jsonl or .parquet event logs in {path}")
        return files
    whole = split_files_at(path).whole
    if whole:
        return list(whole)
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in (".csv", ".txt", ".tsv"))
    if format in ("datashop", "assistments-raw"):
        files = [p for p in files if _header_format(p) == format]
    if not files:
        raise DatasetFormatError(f"no {format} files in {path}")
    return files
