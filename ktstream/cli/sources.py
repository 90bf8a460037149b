"""Where a command's data comes from: ``--dataset NAME``, ``--data PATH [--format NAME]`` or ``--events FILE``.

`resolve` checks the names and the path before anything is read (an unknown data set or format is a
usage error with the closest name); `load_splits` reads train / valid / test from a data set's own split
files, `load_stream` a whole stream (time-ordered protocol).
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from pathlib import Path

from ktstream.cli.main import UsageError, unknown
from ktstream.cli.options import FORMATS


@dataclass(frozen=True)
class Source:
    """Data to read: a label for results (the data set's name or the path), where it is, its format."""

    label: str
    path: Path
    format: str


def resolve(args: argparse.Namespace) -> Source | None:
    """The source the options name (None: none named); names checked, the format detected if not given."""
    from connectors.datasets.splits import DATASET_FORMATS, EVENTS, dataset_dir, detect_format

    dataset, data, events = (getattr(args, k, None) for k in ("dataset", "data", "events"))
    fmt = getattr(args, "format", None)
    if fmt is not None and data is None:
        raise UsageError("--format describes --data PATH; a --dataset's format is known, --events are canonical")
    if fmt is not None and fmt not in FORMATS:
        raise unknown("format", fmt, FORMATS)
    if dataset is not None:
        if dataset not in DATASET_FORMATS:
            raise unknown("data set", dataset, DATASET_FORMATS, "; for data of your own give --data PATH")
        return Source(dataset, dataset_dir(dataset), DATASET_FORMATS[dataset])
    if events is not None:
        if not Path(events).is_file():
            raise FileNotFoundError(f"events file not found: {events}")
        return Source(str(events), Path(events), EVENTS)
    if data is not None:
        return Source(str(data), Path(data), fmt or detect_format(data))
    return None


def check_timestamped(src: Source) -> None:
    """A `UsageError` unless ``src``'s format carries event times (canonical logs are checked once read)."""
    from connectors.datasets.splits import EVENTS, TIMESTAMPED_FORMATS

    if src.format not in (*TIMESTAMPED_FORMATS, EVENTS):
        raise UsageError(f"{src.label} (format {src.format}) has no event times; the time-ordered protocol needs "
                         f"{' or '.join(TIMESTAMPED_FORMATS)} data or an event log with event_time "
                         f"(use `evaluate benchmark` for order-only data)")


def _held_out(learner_id: str, share: float = 0.1) -> bool:
    return int(hashlib.sha1(learner_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


def split_paths(src: Source, fold: int) -> tuple[Path | None, Path | None, Path | None]:
    """(train, valid, test) files of a source's fold (valid None: the data set has no validation file)."""
    from connectors.datasets.splits import split_files_at

    if src.path.is_file():
        return None, None, None
    files = split_files_at(src.path, src.label)
    chosen = next((f for f in files.folds if f.k == fold), None)
    if chosen is None:
        return files.train, None, files.test
    return chosen.train, chosen.valid, chosen.test or files.test


def _reader(src: Source, keep_repeated_rows: bool):
    from connectors.datasets import iter_events, options_of
    from connectors.datasets.splits import EVENTS

    if src.format == EVENTS:
        from ktstream.data.eventlog import read_events

        return read_events
    if keep_repeated_rows and "keep_repeated_rows" not in options_of(src.format):
        raise UsageError(f"format {src.format} has no repeated-row merging; drop --keep-repeated-rows")
    opts = {"keep_repeated_rows": True} if keep_repeated_rows else {}
    return lambda path: list(iter_events(src.format, path, **opts))


def rows_policy(fmt: str, keep_repeated_rows: bool) -> str:
    """results.json's ``rows``: "merged" where the format merges repeated rows and they were merged."""
    from connectors.datasets import options_of
    from connectors.datasets.splits import EVENTS

    mergeable = fmt != EVENTS and "keep_repeated_rows" in options_of(fmt)
    return "merged" if mergeable and not keep_repeated_rows else "as given"


def load_splits(src: Source, fold: int = 1, keep_repeated_rows: bool = False) -> tuple[list, list, list, str]:
    """(train, valid, test) records from a source's own split files, and the rows policy's label.

    Without a validation file 10% of the training learners (by id hash) are held out for selection."""
    read = _reader(src, keep_repeated_rows)
    train_f, valid_f, test_f = split_paths(src, fold)
    if train_f is None or test_f is None:
        raise UsageError(f"{src.label} has no train/test split files for fold {fold} (looked for <name>_train.csv "
                         f"and <name>_test.csv, <name>_train{fold}.csv and <name>_valid{fold}.csv, or train.jsonl "
                         f"and test.jsonl); use `evaluate prequential` for one time-stamped stream")
    train, test = read(train_f), read(test_f)
    if valid_f is not None:
        valid = read(valid_f)
    else:
        valid = [r for r in train if _held_out(r["learner_id"])]
        train = [r for r in train if not _held_out(r["learner_id"])]
    return train, valid, test, rows_policy(src.format, keep_repeated_rows)


def load_stream(src: Source) -> list[dict]:
    """Every record of a source (its whole stream, in the converters' order)."""
    from connectors.datasets import iter_events
    from connectors.datasets.splits import EVENTS, stream_inputs

    if src.format == EVENTS:
        from ktstream.data.eventlog import read_events

        return [r for path in stream_inputs(src.path, EVENTS) for r in read_events(path)]
    return list(iter_events(src.format, stream_inputs(src.path, src.format)))
