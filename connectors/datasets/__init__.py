"""Converters from public knowledge-tracing data formats to the canonical event stream.

Every converter is a generator ``converter(inputs, stats=None, **options)``
yielding `Event.to_record()` dicts, each learner's interactions together and in
the learner's order (event time, else the source's order), ``seq`` counting
0, 1, 2, ... within the learner. They fill a `ConversionStats` as they go,
including how many multi-skill repeat rows were merged.

>>> sorted(CONVERTERS)
['akt', 'assistments-raw', 'datashop', 'dkt-csv', 'dkt-synthetic', 'dkvmn', 'ednet-kt1']
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from connectors.datasets.akt import akt_events
from connectors.datasets.assistments_raw import assistments_raw_events
from connectors.datasets.datashop import datashop_events
from connectors.datasets.dkt_csv import dkt_csv_events
from connectors.datasets.dkt_synthetic import dkt_synthetic_events
from connectors.datasets.dkvmn import dkvmn_events
from connectors.datasets.ednet_kt1 import ednet_kt1_events
from connectors.datasets.event_logs import event_log_events
from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.records import PathLike
from connectors.datasets.splits import DATASET_FORMATS, EVENTS, SplitFiles, data_root, dataset_dir, split_files
from connectors.datasets.stats import ConversionStats
from ktstream.schema import Event

CONVERTERS: dict[str, Callable[..., Iterator[dict[str, Any]]]] = {
    "dkvmn": dkvmn_events,
    "akt": akt_events,
    "dkt-csv": dkt_csv_events,
    "dkt-synthetic": dkt_synthetic_events,
    "assistments-raw": assistments_raw_events,
    "ednet-kt1": ednet_kt1_events,
    "datashop": datashop_events,
}


def options_of(format: str) -> list[str]:
    """The keyword options converter `format` takes."""
    params = inspect.signature(_converter(format)).parameters.values()
    return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]


def iter_events(format: str, inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None,
                **options: Any) -> Iterator[dict[str, Any]]:
    """Records of `inputs` read as `format`; options are checked before any file is opened."""
    converter = _converter(format)
    unknown = sorted(set(options) - set(options_of(format)))
    if unknown:
        raise ValueError(f"format {format!r} takes no option {unknown}; its options: {options_of(format) or 'none'}")
    return converter(inputs, stats if stats is not None else ConversionStats(format), **options)


def convert(format: str, inputs: PathLike | Iterable[PathLike], output: PathLike | None, *,
            validate: bool = False, **options: Any) -> ConversionStats:
    """Convert `inputs` to a canonical event log and return what happened.

    Parameters
    ----------
    format
        A key of `CONVERTERS`.
    inputs
        Source file(s) (EdNet: also folders).
    output
        ``.jsonl`` or ``.parquet`` path (by suffix, as `write_events`), or None
        to only count.
    validate
        Check every record against `ktstream.schema.Event` before writing
        (slower; the converters' records are tested to be valid).
    **options
        The converter's options, e.g. ``keep_repeated_rows=True``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "toy_test1.csv").write_text("1,900\\n5,5,8\\n7,9,7\\n1,1,0\\n")
    >>> stats = convert("akt", folder / "toy_test1.csv", folder / "events.jsonl")
    >>> stats.rows_in, stats.rows_merged, stats.interactions_out, stats.learners
    (3, 1, 2, 1)
    >>> len((folder / "events.jsonl").read_text().splitlines())
    2
    """
    stats = ConversionStats(format)
    records = iter_events(format, inputs, stats, **options)
    if validate:
        records = (_validated(r) for r in records)
    if output is None:
        for _ in records:
            pass
        return stats
    from ktstream.data.eventlog import write_events  # pyarrow: imported only when writing

    # Write beside the target and rename at the end, so a failed conversion
    # never leaves a truncated log that looks complete.
    output = Path(output)
    partial = output.with_name(f".{output.stem}.partial{output.suffix}")
    try:
        write_events(records, partial)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return stats


def _validated(record: dict[str, Any]) -> dict[str, Any]:
    checked = Event.model_validate(record).to_record()
    if checked != record:
        raise DatasetFormatError(f"record {record.get('event_id')!r} changes under validation: {record} -> {checked}")
    return record


def _converter(format: str) -> Callable[..., Iterator[dict[str, Any]]]:
    """The converter of ``format``: a data set's (``CONVERTERS``) or ``"events"``, a canonical log rewritten."""
    if format == EVENTS:
        return event_log_events
    try:
        return CONVERTERS[format]
    except KeyError:
        raise ValueError(f"unknown format {format!r}; known formats: {sorted([*CONVERTERS, EVENTS])}") from None


__all__ = [
    "CONVERTERS", "ConversionStats", "DATASET_FORMATS", "DatasetFormatError", "SplitFiles", "akt_events",
    "assistments_raw_events", "convert", "data_root", "dataset_dir", "datashop_events", "dkt_csv_events",
    "dkt_synthetic_events", "dkvmn_events", "ednet_kt1_events", "iter_events", "options_of", "split_files",
]
