"""Raw ASSISTments 2009-2010 skill-builder rows (``skill_builder_data.csv`` and its subsets).

One row per logged problem attempt, with ``order_id`` the chronological log id.
Two properties of the export shape the conversion:

- The file is not in time order (it is grouped by skill), and there is no wall
  clock. Each learner's rows are sorted by ``order_id``; ``event_time`` is
  absent and ``seq`` is the rank of the ``order_id`` within the learner.
- A problem tagged with several skills is logged once per skill: the same
  ``order_id`` on several rows that differ only in ``skill_id``. By default
  they become one interaction whose ``concept_ids`` are all those skills
  (`ConversionStats.rows_merged` counts the extra rows); ``keep_repeated_rows``
  keeps one interaction per row, as the DKT-era preprocessings did, only to
  reproduce published numbers.

``event_id`` is the ``order_id`` (``f"{order_id}:{k}"`` for the k-th row of a
repeated order_id when rows are kept). ``item_id`` is ``problem_id``,
``concept_ids`` the skill ids (a row without a skill contributes none), and
``response`` is ``correct``. The attempt-level columns that an ordered
(partial-credit) outcome can be derived from are kept in ``attributes``:
``attempt_count``, ``hint_count``, ``ms_first_response``, and ``bottom_hint`` /
``first_action`` where the export fills them.
"""

from __future__ import annotations

import csv
from typing import Any, Iterable, Iterator

from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.records import (PathLike, as_paths, check_concepts, clean_id, event_record, fit_id,
                                         parse_int, parse_response)
from connectors.datasets.sorted_rows import DEFAULT_MEMORY_LIMIT, SortedRows, check_int64, iter_rows
from connectors.datasets.stats import ConversionStats

REQUIRED = ("order_id", "user_id", "problem_id", "correct", "skill_id")
ATTRIBUTES = ("attempt_count", "hint_count", "ms_first_response", "bottom_hint", "first_action")


def _schema():
    import pyarrow as pa

    return pa.schema([("learner", pa.int64()), ("pos", pa.int64()), ("order_id", pa.int64()),
                      ("problem", pa.string()), ("skill", pa.string()), ("response", pa.int64()),
                      ("file", pa.int64()), ("line", pa.int64()), *((a, pa.int64()) for a in ATTRIBUTES)])


def assistments_raw_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
                           keep_repeated_rows: bool = False,
                           memory_limit: str = DEFAULT_MEMORY_LIMIT) -> Iterator[dict[str, Any]]:
    """Stream canonical event records from raw ASSISTments skill-builder CSV files.

    All inputs are read (and every row checked) before the first record is
    produced, since sorting by ``order_id`` needs a learner's rows from every
    file; learners come out in order of first appearance, each learner's
    interactions together. The rows wait on disk, not in memory: they are
    sorted by (learner, ``order_id``, input position) with DuckDB within
    ``memory_limit`` (`connectors.datasets.sorted_rows`), so what is held is
    that limit, one batch of rows and one learner's rows, however large the input.

    Parameters
    ----------
    inputs
        One CSV file or several, with the skill-builder header.
    stats
        Filled while the records are consumed.
    keep_repeated_rows
        Keep one interaction per row for multi-skill problems.
    memory_limit
        DuckDB's memory limit for the sort (it spills to a temporary folder past it).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "as.csv"
    >>> _ = path.write_text("order_id,user_id,problem_id,correct,skill_id\\n"
    ...                     "12,7,p2,0,10\\n11,7,p1,1,1\\n11,7,p1,1,10\\n")
    >>> [(r["event_id"], r["item_id"], r["concept_ids"], r["response"], r["seq"])
    ...  for r in assistments_raw_events(path)]
    [('11', 'p1', ['1', '10'], 1, 0), ('12', 'p2', ['10'], 0, 1)]
    """
    stats = stats if stats is not None else ConversionStats("assistments-raw")
    paths = as_paths(inputs)
    learners: dict[str, int] = {}  # cleaned user_id -> rank of first appearance
    rows = SortedRows(_schema(), memory_limit)
    try:
        for index, path in enumerate(paths):
            with open(path, encoding="utf-8-sig", newline="") as fh:
                reader = csv.DictReader(fh)
                missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
                if missing:
                    raise DatasetFormatError(f"{path}: missing column(s) {missing}; is this a skill-builder export?")
                for row in reader:
                    where = f"{path}:{reader.line_num}"
                    stats.rows_in += 1
                    attrs = [check_int64(parse_int(row[a], a, where), a, where) if (row.get(a) or "").strip()
                             else None for a in ATTRIBUTES]
                    learner = learners.setdefault(clean_id(row["user_id"]), len(learners))
                    rows.append(learner, rows.rows,
                                check_int64(parse_int(row["order_id"], "order_id", where), "order_id", where),
                                clean_id(row["problem_id"]), clean_id(row["skill_id"] or ""),
                                parse_response(row["correct"], where), index, reader.line_num, *attrs)
        names = list(learners)
        current, first, group = None, None, []
        # stable in the input's order: rows of one order_id keep their file order
        for batch in rows.sorted("learner, order_id, pos"):
            for learner, pos, order_id, problem, skill, response, index, line, *attrs in iter_rows(batch):
                if learner != current:
                    if current is not None:
                        yield from _learner(names[current], first[1], group, keep_repeated_rows, stats)
                    current, first, group = learner, None, []
                where = f"{paths[index]}:{line}"
                if first is None or pos < first[0]:
                    first = (pos, where)  # the learner's first row in the input names it in errors
                group.append((order_id, problem, skill, response, where,
                              {a: v for a, v in zip(ATTRIBUTES, attrs) if v is not None}))
        if current is not None:
            yield from _learner(names[current], first[1], group, keep_repeated_rows, stats)
    finally:
        rows.close()


def _learner(learner: str, where: str, rows: list, keep_repeated_rows: bool,
             stats: ConversionStats) -> Iterator[dict[str, Any]]:
    learner_id = fit_id(learner, stats)
    stats.start_learner(learner_id, where)
    yield from _learner_events(learner_id, rows, keep_repeated_rows, stats)


def _learner_events(learner: str, rows: list, keep_repeated_rows: bool,
                    stats: ConversionStats) -> Iterator[dict[str, Any]]:
    """Merge (or, keeping rows, number) the rows of each order_id; emit one record per interaction."""
    groups: list[dict[str, Any]] = []
    for order_id, problem, skill, response, where, attrs in rows:
        last = groups[-1] if groups else None
        repeat = 0
        if last is not None and last["order_id"] == order_id:
            if last["problem"] != problem or last["response"] != response:
                raise DatasetFormatError(
                    f"{where}: order_id {order_id} repeats with a different problem or response than {last['where']}")
            if not keep_repeated_rows:
                if skill and skill not in last["skills"]:
                    last["skills"].append(skill)
                stats.rows_merged += 1
                continue
            repeat = last["repeat"] + 1
            if last["repeat"] == 0:
                last["event_id"] = f"{order_id}:0"
        groups.append({"order_id": order_id, "repeat": repeat, "problem": problem, "response": response,
                       "skills": [skill] if skill else [], "where": where, "attrs": attrs,
                       "event_id": f"{order_id}:{repeat}" if repeat else str(order_id)})
    for seq, g in enumerate(groups):
        cids = check_concepts([fit_id(s, stats) for s in g["skills"]], g["where"])
        rec = event_record(g["event_id"], learner, fit_id(g["problem"], stats), cids, g["response"], seq=seq,
                           attributes=dict(g["attrs"]))
        stats.observe(rec)
        yield rec
