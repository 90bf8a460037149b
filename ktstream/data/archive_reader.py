"""Read the event archive (written by ``connectors/archive.py``) back as canonical records.

The archive is a folder of Parquet files partitioned by event date::

    FOLDER/event_date=YYYY-MM-DD/part-*.parquet     (event_date=none: events without a clock)

Records come back in event-time order (ties: learner id, then the source's
``seq``, then the archive's file order), with repeats dropped by (learner id,
event id), the first copy in file order kept: the archiver is at-least-once (a
crash between a file's rename and the offset commit writes those records
again), the reader makes it exactly-once. The work is DuckDB's, in columns
(``ktstream.data.columnar``), within a configured memory limit. ``start_ms`` /
``end_ms`` keep only events with ``start_ms <= event_time < end_ms``, reading
only the date folders that overlap the range. No Kafka client here.

>>> import tempfile, pathlib
>>> from ktstream.data.eventlog import write_parquet
>>> root = pathlib.Path(tempfile.mkdtemp()); (root / "event_date=1970-01-01").mkdir()
>>> recs = [{"event_id": e, "learner_id": "u", "item_id": "q", "event_time": t} for e, t in [("b", 5), ("a", 2)]]
>>> _ = write_parquet(recs + recs[:1], root / "event_date=1970-01-01" / "part-0.parquet")
>>> [r["event_id"] for r in read_archive(root)], archive_summary(root)["rows"]
(['a', 'b'], 3)
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ktstream.data.columnar import DAY_MS, PREFIX, UNDATED, ScanConfig, _day_start_ms, archive_files, scan  # noqa: F401
from ktstream.data.eventlog import PARQUET_SCHEMA


def read_archive(folder: str | Path, start_ms: int | None = None, end_ms: int | None = None,
                 include_undated: bool = False, cfg: ScanConfig | None = None) -> list[dict[str, Any]]:
    """Canonical records in event-time order, deduplicated; undated ones (if asked for) last, in file order.

    The records of an archive that fits in memory; the archive in columns, streamed with bounded memory,
    is ``ktstream.data.columnar.scan`` (which this reads through).
    """
    reader = scan(folder, start_ms, end_ms, include_undated, "time", cfg, columns=PARQUET_SCHEMA.names)
    out = []
    for batch in reader:
        for row in batch.to_pylist():
            rec = {k: v for k, v in row.items() if v is not None}
            if "attributes" in rec:
                rec["attributes"] = json.loads(rec["attributes"])
            out.append(rec)
    return out


def archive_summary(folder: str | Path) -> dict[str, Any]:
    """Files, rows (repeats included) and the event-time range, from Parquet metadata only (cheap)."""
    rows, lo, hi = 0, None, None
    files = archive_files(folder)
    for path in files:
        meta = pq.ParquetFile(str(path)).metadata
        rows += meta.num_rows
        col = meta.schema.to_arrow_schema().get_field_index("event_time")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            if stats is not None and stats.has_min_max:
                lo = stats.min if lo is None else min(lo, stats.min)
                hi = stats.max if hi is None else max(hi, stats.max)
    return {"files": len(files), "rows": rows, "min_event_time_ms": lo, "max_event_time_ms": hi}


def day_start_ms(ms: int) -> int:
    """Start (UTC midnight) of the day holding ``ms``; handy for aligning cutoffs."""
    return _day_start_ms(datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).date())
