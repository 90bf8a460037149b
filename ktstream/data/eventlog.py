"""The canonical event log on disk: JSONL (one event record per line) or Parquet.

Records are the plain dicts of `Event.to_record()`: event_time in epoch
milliseconds (absent when the source has no clock), `seq` the source order.
Writers stream; readers return records in file order. ``parquet_row`` checks
one record against the Parquet columns, so a writer that must not fail on one
bad record (the archiver) can set that record aside before writing a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ktstream.exceptions import KTStreamError
from ktstream.schema import Event

PARQUET_SCHEMA = pa.schema([
    ("event_id", pa.string()),
    ("learner_id", pa.string()),
    ("item_id", pa.string()),
    ("concept_ids", pa.list_(pa.string())),
    ("response", pa.int16()),
    ("event_time", pa.int64()),
    ("seq", pa.int64()),
    ("step_id", pa.string()),
    ("elapsed_ms", pa.int64()),
    ("attributes", pa.string()),  # JSON text: free-form per source
])
_COLUMNS = [f.name for f in PARQUET_SCHEMA]
_TEXT = ("event_id", "learner_id", "item_id", "step_id")
_INTS = {"response": 2**15, "event_time": 2**63, "seq": 2**63, "elapsed_ms": 2**63}  # column -> -bound..bound-1


class EventLogError(KTStreamError):
    """A record the event log's Parquet columns cannot hold."""


def parquet_row(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as the Parquet columns hold it (attributes as JSON text), or EventLogError saying why not.

    >>> parquet_row({"event_id": "e", "learner_id": "u", "item_id": "q", "attributes": {"a": 1}})["attributes"]
    '{"a":1}'
    >>> parquet_row({"event_id": "e", "learner_id": "u", "item_id": "q", "seq": 2**63})
    Traceback (most recent call last):
    ktstream.data.eventlog.EventLogError: seq 9223372036854775808 does not fit the int64 column
    """
    row = {c: record.get(c) for c in _COLUMNS}
    for c in _TEXT:
        if not isinstance(row[c], str) and (row[c] is not None or c != "step_id"):
            raise EventLogError(f"{c} must be text, got {type(row[c]).__name__}")
    for c, bound in _INTS.items():
        v = row[c]
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not -bound <= v < bound):
            raise EventLogError(f"{c} {v!r} does not fit the int{bound.bit_length()} column")
    concepts = row["concept_ids"] or []
    if not isinstance(concepts, list) or not all(isinstance(c, str) for c in concepts):
        raise EventLogError("concept_ids must be a list of text")
    row["concept_ids"] = concepts
    attributes = row["attributes"]
    try:  # orjson stops at 254 levels of nesting with an error, never a RecursionError
        row["attributes"] = orjson.dumps(attributes).decode() if attributes else None
    except orjson.JSONEncodeError as exc:
        raise EventLogError(f"attributes are not JSON: {exc}") from None
    return row


def sort_key(record: dict[str, Any]) -> tuple:
    """Per-learner order: event time, then the source's own order (ties kept stable)."""
    t = record.get("event_time")
    return (record["learner_id"], t if t is not None else -1, record.get("seq", 0))


def write_jsonl(records: Iterable[dict[str, Any]], path: str | Path) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, separators=(",", ":")) + "\n")
            n += 1
    return n


def write_parquet(records: Iterable[dict[str, Any]], path: str | Path, chunk: int = 100_000,
                  rows: bool = False) -> int:
    """Write records (or, with ``rows``, what ``parquet_row`` made of them); EventLogError on a bad record."""
    n = 0
    with pq.ParquetWriter(str(path), PARQUET_SCHEMA) as writer:
        buf: list[dict[str, Any]] = []
        for r in records:
            buf.append(r if rows else parquet_row(r))
            if len(buf) >= chunk:
                writer.write_table(_to_table(buf))
                n += len(buf)
                buf = []
        if buf:
            writer.write_table(_to_table(buf))
            n += len(buf)
    return n


def _to_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table({c: [r[c] for r in rows] for c in _COLUMNS}, schema=PARQUET_SCHEMA)


def write_events(records: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write by suffix: .parquet or .jsonl."""
    path = Path(path)
    if path.suffix == ".parquet":
        return write_parquet(records, path)
    return write_jsonl(records, path)


def iter_jsonl(path: str | Path, validate: bool = False) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                yield Event.model_validate(rec).to_record() if validate else rec


def iter_parquet(path: str | Path) -> Iterator[dict[str, Any]]:
    pf = pq.ParquetFile(str(path))
    for batch in pf.iter_batches():
        for row in batch.to_pylist():
            rec = {k: v for k, v in row.items() if v is not None}
            if "attributes" in rec:
                rec["attributes"] = json.loads(rec["attributes"])
            yield rec


def read_events(path: str | Path, validate: bool = False) -> list[dict[str, Any]]:
    """Read a canonical event log (.jsonl or .parquet) into a list of records."""
    path = Path(path)
    if path.suffix == ".parquet":
        return list(iter_parquet(path))
    return list(iter_jsonl(path, validate=validate))
