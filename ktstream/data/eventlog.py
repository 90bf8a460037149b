"""The canonical event log on disk: JSONL (one event record per line) or Parquet.

Records are the plain dicts of `Event.to_record()`: event_time in epoch
milliseconds (absent when the source has no clock), `seq` the source order.
Writers stream; readers return records in file order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

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


def write_parquet(records: Iterable[dict[str, Any]], path: str | Path, chunk: int = 100_000) -> int:
    n = 0
    with pq.ParquetWriter(str(path), PARQUET_SCHEMA) as writer:
        buf: list[dict[str, Any]] = []
        for r in records:
            buf.append(r)
            if len(buf) >= chunk:
                writer.write_table(_to_table(buf))
                n += len(buf)
                buf = []
        if buf:
            writer.write_table(_to_table(buf))
            n += len(buf)
    return n


def _to_table(records: list[dict[str, Any]]) -> pa.Table:
    cols: dict[str, list] = {c: [] for c in _COLUMNS}
    for r in records:
        for c in _COLUMNS:
            v = r.get(c)
            if c == "attributes":
                v = json.dumps(v) if v else None
            elif c == "concept_ids" and v is None:
                v = []
            cols[c].append(v)
    return pa.table(cols, schema=PARQUET_SCHEMA)


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
