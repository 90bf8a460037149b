"""Data sets for a notebook: one call from a name, a folder, a file or a table to events and splits.

``load_dataset`` reads

- a data set we know by name (``DATASET_FORMATS``), from the data root (``$KTSTREAM_DATA``);
- any folder of split files (``<prefix>_train.csv`` / ``_test.csv``, ``_train{k}`` / ``_valid{k}`` /
  ``_test{k}``; canonical ``train.jsonl`` / ``valid`` / ``test``) in a converter's format (``format=``,
  else known from the folder's name, or told from its files as ``ktstream evaluate --data`` does:
  ``connectors.datasets.splits.detect_format``), or a folder of one format without split files (the
  whole stream);
- a canonical event file (``.jsonl`` / ``.parquet``), or a file in a converter's format (``format=``);
- a pandas DataFrame, a pyarrow Table or a list of event dicts (ktstream.api.events).

It returns a ``Dataset``: every event, and the data set's own train / valid / test parts where it has
split files (by learner, as published results use them; fold ``fold``). ``split_by_learner`` makes
such parts for data without them. The converters and their helpers are re-exported here, so none of
this needs the top-level ``connectors`` package by name: ``ktstream.datasets.convert`` and so on.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp()) / "toy"
>>> folder.mkdir()
>>> blocks = {"train1": "1,u1\\n5,6\\n1,2\\n1,0\\n2,u2\\n7\\n1\\n1\\n", "valid1": "3,u3\\n5\\n1\\n1\\n",
...           "test1": "4,u4\\n6,5\\n2,1\\n0,1\\n"}
>>> for part, text in blocks.items():
...     _ = (folder / f"toy_{part}.csv").write_text(text)
>>> data = load_dataset(folder, format="akt")
>>> data
Dataset('toy', format 'akt', rows merged, 4 learners, 6 events; fold 1: train 2 learners, valid 1, test 1)
>>> [(r["learner_id"], r["item_id"], r.get("response")) for r in data.test]
[('u4', '6', 0), ('u4', '5', 1)]
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from connectors.datasets import (CONVERTERS, DATASET_FORMATS, ConversionStats, DatasetFormatError, convert,
                                 data_root, dataset_dir, iter_events, options_of, split_files)
from connectors.datasets.splits import EVENT_SUFFIXES, EVENTS, detect_format, split_files_at, stream_inputs
from ktstream.api.events import is_table, records_frame, to_records
from ktstream.data.eventlog import read_events
from ktstream.data.histories import group_by_learner

#: A validation file beside a fixed train / test pair (``SplitFiles`` keeps folds' validation files only).
_FIXED_VALID = re.compile(r"^(?:.+_valid\.csv|valid\.(?:jsonl|parquet))$")


@dataclass(frozen=True)
class Dataset:
    """Canonical event records, and the data set's own train / valid / test parts where it has them.

    ``rows`` says how repeated multi-skill rows were read ("merged" into one interaction, or "as given").
    ``valid`` is None when the split files have no validation part (``train`` then holds a tenth of the
    training learners out itself).
    """

    name: str
    events: list[dict[str, Any]]
    train: list[dict[str, Any]] | None = None
    valid: list[dict[str, Any]] | None = None
    test: list[dict[str, Any]] | None = None
    format: str = EVENTS
    rows: str = "as given"
    fold: int | None = None

    @classmethod
    def of(cls, events: Any, name: str = "events") -> "Dataset":
        """A Dataset of events in any form ``ktstream.api.events.to_records`` reads (no splits)."""
        return cls(name, to_records(events))

    @property
    def learners(self) -> list[str]:
        """Learner ids, sorted."""
        return sorted({r["learner_id"] for r in self.events})

    def learner(self, learner_id: str) -> list[dict[str, Any]]:
        """One learner's events in the learner's order (event time, then the source's order)."""
        return group_by_learner(r for r in self.events if r["learner_id"] == learner_id).get(learner_id, [])

    def split_by_learner(self, test: float = 0.2, valid: float = 0.1, seed: int = 0) -> "Dataset":
        """The events cut into train / valid / test by learner (shares of the learners, chosen by a hash of
        their ids and ``seed``, so a learner is in one part whatever else the data holds)."""
        if not (0 < test < 1 and 0 <= valid < 1 and test + valid < 1):
            raise ValueError(f"test and valid must be shares of the learners with test + valid < 1, got {test}, "
                             f"{valid}")
        part = {lid: _share(lid, seed) for lid in self.learners}
        pick = lambda lo, hi: [r for r in self.events if lo <= part[r["learner_id"]] < hi]  # noqa: E731
        return replace(self, train=pick(test + valid, 1.0), valid=pick(test, test + valid) or None,
                       test=pick(0.0, test), fold=None)

    def to_frame(self, part: str = "events"):
        """A part (events, train, valid or test) as a pandas DataFrame, one row per event."""
        if part not in ("events", "train", "valid", "test"):
            raise ValueError(f"part must be one of events, train, valid, test; got {part!r}")
        records = getattr(self, part)
        if records is None:
            raise ValueError(f"{self.name} has no {part} part")
        return records_frame(records)

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        learners = lambda recs: len({r["learner_id"] for r in recs})  # noqa: E731
        text = (f"Dataset({self.name!r}, format {self.format!r}, rows {self.rows}, {learners(self.events)} learners, "
                f"{len(self.events)} events")
        if self.train is not None:
            fold = f"fold {self.fold}" if self.fold is not None else "splits"
            valid = "none" if self.valid is None else learners(self.valid)
            text += f"; {fold}: train {learners(self.train)} learners, valid {valid}, test {learners(self.test or [])}"
        return text + ")"


def _share(learner_id: str, seed: int) -> float:
    return int(hashlib.sha1(f"{seed}:{learner_id}".encode()).hexdigest()[:12], 16) / 16**12


def load_dataset(source: Any, *, format: str | None = None, fold: int = 1, keep_repeated_rows: bool = False,
                 root: str | os.PathLike | None = None) -> Dataset:
    """Events and splits of ``source`` (see the module docstring).

    Parameters
    ----------
    format
        The converter reading a folder or file (``sorted(CONVERTERS)``) or ``"events"``; known by name for
        the data sets of ``DATASET_FORMATS`` and for ``.jsonl`` / ``.parquet`` files.
    fold
        Which ``train{k}`` / ``valid{k}`` (/ ``test{k}``) files to use where there are several.
    keep_repeated_rows
        Keep multi-skill problems as repeated rows (only to reproduce published figures).
    root
        The data root for a data set named (default: ``$KTSTREAM_DATA``, else ``../shared/data``).
    """
    if format is not None and format not in (*CONVERTERS, EVENTS):
        raise ValueError(f"unknown format {format!r}; valid: {', '.join(sorted([*CONVERTERS, EVENTS]))}")
    if is_table(source) or isinstance(source, (list, tuple)):
        return Dataset.of(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"load_dataset reads a name, a path, a DataFrame, a pyarrow Table or a list of events; got "
                        f"{type(source).__name__}")
    path = Path(source)
    if isinstance(source, str) and source in DATASET_FORMATS and not path.exists():
        path, format = dataset_dir(source, root), format or DATASET_FORMATS[source]
    elif not path.exists():
        raise FileNotFoundError(f"no data set, folder or file {str(source)!r}; data sets we know by name: "
                                f"{', '.join(sorted(DATASET_FORMATS))} (looked in {data_root(root)})")
    fmt = format or _format_of(path)
    opts = {"keep_repeated_rows": True} if keep_repeated_rows else {}
    if keep_repeated_rows and (fmt == EVENTS or "keep_repeated_rows" not in options_of(fmt)):
        raise ValueError(f"format {fmt!r} has no repeated-row merging; drop keep_repeated_rows")
    rows = "merged" if fmt != EVENTS and "keep_repeated_rows" in options_of(fmt) and not keep_repeated_rows \
        else "as given"
    read_all = _reader(fmt, opts)
    read = lambda path: read_all([path])  # noqa: E731
    base = Dataset(path.stem if path.is_file() else path.name, [], format=fmt, rows=rows)
    if path.is_file():
        return replace(base, events=read(path))
    train_f, valid_f, test_f, used = _split_paths(path, fold)
    if train_f is not None and test_f is not None:
        train, test = read(train_f), read(test_f)
        valid = read(valid_f) if valid_f is not None else None
        return replace(base, events=train + (valid or []) + test, train=train, valid=valid, test=test, fold=used)
    return replace(base, events=read_all(stream_inputs(path, fmt)))


def _format_of(path: Path) -> str:
    """The format of a folder named as a data set we know, or holding canonical logs, else what its files say
    (``detect_format``)."""
    if path.is_dir() and path.name in DATASET_FORMATS:
        return DATASET_FORMATS[path.name]
    if path.is_dir() and any(p.suffix in EVENT_SUFFIXES for p in path.iterdir()):
        return EVENTS
    try:
        return detect_format(path)
    except DatasetFormatError as exc:
        raise DatasetFormatError(str(exc).replace("give --format", "give format=")) from None


def _split_paths(folder: Path, fold: int) -> tuple[Path | None, Path | None, Path | None, int | None]:
    """(train, valid, test) split files of ``folder`` and the fold they are: fold ``fold`` where there are folds
    (its test file, else the fixed one), else the fixed train / test pair (and a fixed validation file beside it;
    fold None); Nones without split files."""
    files = split_files_at(folder)
    chosen = next((f for f in files.folds if f.k == fold), None)
    if chosen is not None:
        return chosen.train, chosen.valid, chosen.test or files.test, fold
    valid = next((p for p in sorted(folder.iterdir()) if _FIXED_VALID.match(p.name)), None)
    return files.train, valid, files.test, None


def _reader(fmt: str, opts: dict[str, Any]):
    """Records of a list of files read as ``fmt``, one after another."""
    if fmt == EVENTS:
        return lambda paths: [r for p in paths for r in read_events(p)]
    return lambda paths: list(iter_events(fmt, paths, **opts))


__all__ = ["CONVERTERS", "DATASET_FORMATS", "EVENTS", "ConversionStats", "Dataset", "DatasetFormatError", "convert",
           "data_root", "dataset_dir", "iter_events", "load_dataset", "options_of", "split_files"]
