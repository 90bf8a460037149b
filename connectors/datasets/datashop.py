"""PSLC DataShop "student-step" exports (tab-separated), e.g. the KDD Cup 2010 Cognitive Tutor data.

One row per (student, problem, step): the step is the unit a tutor grades, so
it is the interaction. Mapping:

- ``learner_id`` = ``Anon Student Id``;
- ``item_id`` = ``f"{Problem Name} | {Step Name}"`` (a step name alone, like
  ``R1C1``, recurs across problems);
- ``concept_ids`` = the KC column (``KC(Default)`` unless another KC model is
  chosen) split on ``~~``; empty means no concept. KC names longer than the
  schema's 256 characters are shortened with a hash (see `records.fit_id`);
- ``response`` = ``Correct First Attempt``;
- ``event_time`` = ``First Transaction Time`` (the moment the first attempt was
  graded), else ``Step Start Time``, read as UTC (DataShop writes local times
  without a zone; UTC keeps them monotone and unambiguous);
- ``attributes`` keep ``Incorrects``, ``Hints`` and ``Corrects``, from which an
  ordered (partial-credit) outcome can be derived.

The export is grouped by student but follows DataShop's problem order, not time
order, so each student's rows are sorted by event time (stable: ties keep file
order) and ``seq`` is the position after the sort. The sort runs in DuckDB over
the parsed rows kept on disk (`connectors.datasets.sorted_rows`), so an export
of any size converts within a fixed memory budget.

DataShop exports are often cut at a size limit. A last line with fewer
fields than the header (cut mid-row) is skipped and counted in
``stats.notes["incomplete_last_row"]``; a short row anywhere else is an error.
"""

from __future__ import annotations

import calendar
import csv
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.records import PathLike, as_paths, check_concepts, event_record, fit_id, parse_int, \
    parse_response
from connectors.datasets.sorted_rows import DEFAULT_MEMORY_LIMIT, SortedRows, check_int64, iter_rows
from connectors.datasets.stats import ConversionStats

STUDENT, PROBLEM, STEP = "Anon Student Id", "Problem Name", "Step Name"
FIRST_TIME, START_TIME, CORRECT = "First Transaction Time", "Step Start Time", "Correct First Attempt"
COUNT_COLUMNS = {"Incorrects": "incorrects", "Hints": "hints", "Corrects": "corrects"}
KC_SEPARATOR = "~~"


def parse_time_ms(text: str, where: str) -> int:
    """DataShop time (``2006-10-26 09:52:30.0``) as epoch milliseconds, read as UTC.

    >>> parse_time_ms("1970-01-01 00:00:01.5", "x")
    1500
    """
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DatasetFormatError(f"{where}: time {text!r} is not 'YYYY-MM-DD HH:MM:SS[.f]'") from None
    return calendar.timegm(t.utctimetuple()) * 1000 + t.microsecond // 1000


def _schema():
    import pyarrow as pa

    return pa.schema([("student", pa.int64()), ("pos", pa.int64()), ("time_ms", pa.int64()),
                      ("event_id", pa.string()), ("item", pa.string()), ("concepts", pa.list_(pa.string())),
                      ("response", pa.int64()), *((key, pa.int64()) for key in COUNT_COLUMNS.values())])


def datashop_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
                    kc_column: str | None = None, memory_limit: str = DEFAULT_MEMORY_LIMIT) -> Iterator[dict[str, Any]]:
    """Stream canonical event records from DataShop student-step exports.

    All rows are read (and checked) before the first record is produced (a
    student's rows must be sorted by time); students come out in order of
    first appearance. The rows wait on disk, not in memory: they are sorted by
    (student, time, input position) with DuckDB within ``memory_limit``
    (`connectors.datasets.sorted_rows`) and come back a batch at a time, so what
    is held is that limit and one batch of rows, however large the input.

    Parameters
    ----------
    inputs
        One export or several (tab-separated, with DataShop's header).
    stats
        Filled while the records are consumed.
    kc_column
        Which KC model gives the concepts: a header name such as
        ``"KC(SubSkills)"``. Default: ``KC(Default)``, else the first ``KC(...)``
        column; no concepts if there is none.
    memory_limit
        DuckDB's memory limit for the sort (it spills to a temporary folder past it).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "steps.txt"
    >>> _ = path.write_text("Row\\tAnon Student Id\\tProblem Name\\tStep Name\\tStep Start Time\\t"
    ...     "First Transaction Time\\tCorrect First Attempt\\tKC(Default)\\n"
    ...     "1\\ts1\\tP1\\tR1\\t2006-10-26 09:53:30.0\\t2006-10-26 09:53:41.0\\t1\\tA~~B\\n"
    ...     "2\\ts1\\tP1\\tR2\\t2006-10-26 09:51:58.0\\t\\t0\\t\\n")
    >>> [(r["item_id"], r["concept_ids"], r["response"], r["seq"]) for r in datashop_events(path)]
    [('P1 | R2', [], 0, 0), ('P1 | R1', ['A', 'B'], 1, 1)]
    """
    stats = stats if stats is not None else ConversionStats("datashop")
    students: dict[str, int] = {}  # student name -> rank of first appearance
    rows = SortedRows(_schema(), memory_limit)
    try:
        for path in as_paths(inputs):
            for where, row_id, fields, kcs in _rows(path, kc_column, stats):
                student, problem, step = fields[STUDENT], fields[PROBLEM], fields[STEP]
                if not student or not (problem or step):
                    raise DatasetFormatError(f"{where}: empty student, problem or step name")
                time_text = fields.get(FIRST_TIME) or ""
                if not time_text.strip():
                    time_text = fields.get(START_TIME) or ""
                    if not time_text.strip():
                        raise DatasetFormatError(f"{where}: neither {FIRST_TIME!r} nor {START_TIME!r} is given")
                    stats.note("time_from_step_start")
                cids = [fit_id(k.strip(), stats) for k in kcs.split(KC_SEPARATOR) if k.strip()]
                counts = [check_int64(parse_int(fields[col], col, where), col, where)
                          if (fields.get(col) or "").strip() else None for col in COUNT_COLUMNS]
                rows.append(students.setdefault(student, len(students)), rows.rows, parse_time_ms(time_text, where),
                            f"{path.stem}:{row_id}", fit_id(f"{problem} | {step}", stats), check_concepts(cids, where),
                            parse_response(fields[CORRECT], where), *counts)
        names = list(students)
        current, learner, seq = None, "", 0
        # stable: equal times keep the input's order
        for batch in rows.sorted("student, time_ms, pos", columns="* EXCLUDE (pos)"):
            for student, time_ms, event_id, item, concepts, response, *counts in iter_rows(batch):
                if student != current:
                    current, learner, seq = student, fit_id(names[student], stats), 0
                    stats.start_learner(learner, f"student {names[student]!r}")
                attrs = {key: v for key, v in zip(COUNT_COLUMNS.values(), counts) if v is not None}
                rec = event_record(fit_id(event_id, stats), learner, item, concepts, response, seq=seq,
                                   event_time=time_ms, attributes=attrs)
                seq += 1
                stats.observe(rec)
                yield rec
    finally:
        rows.close()


def _kc_column(header: list[str], requested: str | None, path: Path) -> str | None:
    if requested is not None:
        if requested not in header:
            raise DatasetFormatError(f"{path}: no column {requested!r}; KC columns here: "
                                     f"{[h for h in header if h.startswith('KC(')]}")
        return requested
    if "KC(Default)" in header:
        return "KC(Default)"
    return next((h for h in header if h.startswith("KC(")), None)


def _rows(path: Path, kc_column: str | None,
          stats: ConversionStats) -> Iterator[tuple[str, str, dict[str, str], str]]:
    """(location, row id, fields by column name, KC text) for every complete row of one export."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in (STUDENT, PROBLEM, STEP, CORRECT) if c not in header]
        if missing or (FIRST_TIME not in header and START_TIME not in header):
            raise DatasetFormatError(f"{path}: missing column(s) {missing or [FIRST_TIME]}; "
                                     "is this a DataShop student-step export?")
        kc = _kc_column(header, kc_column, path)
        stats.notes["kc_column"] = kc
        pending: tuple[str, list[str]] | None = None
        for row in reader:
            if not row:
                continue
            if pending is not None:  # a short row followed by more rows: not a cut-off end
                raise DatasetFormatError(f"{pending[0]}: {len(pending[1])} fields, expected {len(header)}")
            where = f"{path}:{reader.line_num}"
            if len(row) < len(header):
                pending = (where, row)
                continue
            if len(row) > len(header):
                raise DatasetFormatError(f"{where}: {len(row)} fields, expected {len(header)}")
            stats.rows_in += 1
            fields = dict(zip(header, row))
            yield where, fields.get("Row") or str(reader.line_num), fields, (fields.get(kc) or "") if kc else ""
        if pending is not None:
            stats.note("incomplete_last_row")
