"""Canonical event logs as a conversion's input: ``ktstream convert events LOG.jsonl -o LOG.parquet``.

A log of JSON lines (written by ``ktstream convert``, an export, or a platform's own job) is read a line at a
time and each line checked against the event schema as the engine checks a record
(``Event.model_validate_json``), then written in the canonical form (event time in epoch milliseconds); a
Parquet log is read in batches. Nothing is held but the record in hand and the writer's chunk, so a log too
large for the record path of ``ktstream evaluate`` becomes the Parquet log its columnar path reads. Records
keep their order. A line the schema refuses stops the conversion with its file and line number (``convert``
writes under a temporary name, so no partial log is left to be mistaken for a whole one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

import pydantic

from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.records import PathLike, as_paths
from connectors.datasets.splits import EVENT_SUFFIXES
from connectors.datasets.stats import ConversionStats
from ktstream.schema import Event


def event_log_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats) -> Iterator[dict[str, Any]]:
    """Canonical records of the event logs ``inputs`` (.jsonl or .parquet), in file order, each validated."""
    paths = as_paths(inputs)
    for path in paths:
        if path.suffix not in EVENT_SUFFIXES:
            raise DatasetFormatError(f"{path}: an event log ends in {' or '.join(EVENT_SUFFIXES)}")
    for path in paths:
        for where, text in _lines(path):
            try:
                record = Event.model_validate_json(text).to_record()
            except pydantic.ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"
                                     for e in exc.errors()[:3])
                raise DatasetFormatError(f"{where}: not an event ({problems})") from None
            stats.rows_in += 1
            stats.observe(record)
            yield record


def _lines(path: Path) -> Iterator[tuple[str, bytes | str]]:
    """(file:line or file:record, JSON text) of each record of ``path``."""
    if path.suffix == ".jsonl":
        with open(path, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    yield f"{path}:{n}", line
        return
    import orjson

    from ktstream.data.eventlog import iter_parquet  # pyarrow: imported only for Parquet logs

    for n, record in enumerate(iter_parquet(path), 1):
        yield f"{path}: record {n}", orjson.dumps(record)
