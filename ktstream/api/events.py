"""Events from what a notebook holds (dicts, a pandas DataFrame, a pyarrow Table) as canonical records, and back.

A canonical record is what ``ktstream.schema.Event.to_record()`` gives: ``learner_id``, ``item_id``,
``concept_ids``, ``response`` (absent: a prediction request), ``event_time`` in epoch milliseconds, and
the optional ``event_id``, ``seq``, ``step_id``, ``elapsed_ms``, ``attributes``. Every event is checked by
the event schema, as the engine checks input at its edge, so a notebook meets the same rules: an event
time is RFC 3339 text, epoch milliseconds or a datetime *with* a time zone. Two conveniences on top:
whole-number ids become text (a DataFrame's integer columns), and one concept id may stand alone; an
event without ``event_id`` gets ``<learner_id>#<n>`` (n counting the learner's events in the input).

>>> to_records([{"learner_id": 7, "item_id": "q1", "concept_ids": "fractions", "response": 1,
...              "event_time": "2024-05-01T10:00:00Z"}])
[{'event_id': '7#0', 'learner_id': '7', 'item_id': 'q1', 'concept_ids': ['fractions'], 'response': 1, \
'event_time': 1714557600000}]
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

from ktstream.schema import Event

_IDS = ("event_id", "learner_id", "item_id", "step_id")


def is_table(x: Any) -> bool:
    """A pandas DataFrame or a pyarrow Table / RecordBatch (told apart by their methods: neither is imported)."""
    return hasattr(x, "to_pylist") and hasattr(x, "schema") or hasattr(x, "to_dict") and hasattr(x, "columns")


def table_rows(table: Any) -> list[dict[str, Any]]:
    """The rows of a pandas DataFrame or a pyarrow Table as dicts, missing values as None (not NaN)."""
    if not hasattr(table, "to_pylist"):  # pandas: through arrow, which turns NaN and NaT into nulls
        import pyarrow as pa

        table = pa.Table.from_pandas(table, preserve_index=False)
    return [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]


def to_records(events: Any) -> list[dict[str, Any]]:
    """Canonical records of ``events``: an iterable of dicts (``Event`` objects too) or a table (see the module)."""
    rows = table_rows(events) if is_table(events) else events
    counts: Counter = Counter()
    out = []
    for row in rows:
        record = to_record(row)
        if "event_id" not in record:
            lid = record["learner_id"]
            record = {"event_id": f"{lid}#{counts[lid]}", **record}
            counts[lid] += 1
        out.append(record)
    return out


def to_record(event: Mapping[str, Any] | Event, event_id: str | None = None) -> dict[str, Any]:
    """One event checked by the schema, as a canonical record; ``event_id`` fills a missing one."""
    if isinstance(event, Event):
        return event.to_record()
    placeholder = event_id is None and event.get("event_id") is None
    record = to_event(event, "-" if placeholder else event_id).to_record()
    if placeholder:
        del record["event_id"]
    return record


def to_event(event: Mapping[str, Any] | Event, event_id: str) -> Event:
    """One event checked by the schema; ``event_id`` fills a missing one."""
    if isinstance(event, Event):
        return event
    row = dict(event)
    for key in _IDS:
        if _whole_number(row.get(key)):
            row[key] = str(row[key])
    concepts = row.get("concept_ids")
    if isinstance(concepts, (str, int)) and not isinstance(concepts, bool):
        concepts = [concepts]
    if concepts is not None:
        row["concept_ids"] = [str(c) if _whole_number(c) else c for c in concepts]
    if row.get("event_id") is None:
        row["event_id"] = event_id
    return Event.model_validate(row)


def _whole_number(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def frame(columns: Mapping[str, Iterable[Any]]):
    """A pandas DataFrame of ``columns``; an ImportError that says what to install when pandas is absent."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("DataFrames need pandas: pip install pandas (or ktstream[notebook])") from exc
    return pd.DataFrame({k: list(v) if not hasattr(v, "__len__") else v for k, v in columns.items()})


def records_frame(records: Iterable[Mapping[str, Any]]):
    """Canonical records as a DataFrame, one column per field (event_time as epoch milliseconds)."""
    records = list(records)
    keys = list(dict.fromkeys(k for r in records for k in r))
    return frame({k: [r.get(k) for r in records] for k in keys})
