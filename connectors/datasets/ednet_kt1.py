"""EdNet KT1 (Riiid's Santa TOEIC app): one CSV per user, joined with ``questions.csv``.

KT1 rows hold ``timestamp`` (ms, when the question was shown), ``solving_id``,
``question_id``, ``user_answer`` and ``elapsed_time`` (ms); whether the answer
is right, the question's bundle and its tags come from the EdNet-Contents
``questions.csv``. Some copies (e.g. ``premonish/EdNet``'s ``_u<id>.csv``) have
those columns joined in already; they are used when no question table is found.

Mapping: ``learner_id`` is the file's ``user_id`` column, else the file name
(``u1272.csv`` or ``_u1272.csv`` -> ``u1272``); ``item_id`` is ``question_id``;
``concept_ids`` are the question's ``tags`` split on ``;`` (EdNet writes ``-1``
for "no tag", which becomes no concept); ``response`` is
``user_answer == correct_answer``; ``event_time`` is ``timestamp``;
``elapsed_ms`` is ``elapsed_time``; ``attributes`` keep ``user_answer`` and
``part``.

Steps: a bundle's questions (e.g. the three questions on one reading passage)
are shown together and answered before any feedback, so they form one step
(invariant 1): ``step_id = f"{bundle_id}:{solving_id}"``. Rows are sorted per
user by (``timestamp``, ``solving_id``), ties in file order; ``seq`` is the
position after that sort.

Duplicates: some users have rows that repeat an earlier row's (timestamp,
question_id) exactly. They are kept, because both are in the source log and
nothing says which one is spurious; they fall in the same step, so neither
response is visible when the other is predicted. They are counted in
`ConversionStats.duplicate_rows` so that a consumer can decide otherwise.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.records import (PathLike, as_paths, check_concepts, clean_id, event_record, fit_id,
                                         parse_int)
from connectors.datasets.stats import ConversionStats

USER_FILE = re.compile(r"^_?u\d+\.csv$")
REQUIRED = ("timestamp", "solving_id", "question_id", "user_answer")
QUESTION_COLUMNS = ("bundle_id", "correct_answer", "tags", "part")
NO_TAG = "-1"


def load_questions(path: str | Path) -> dict[str, dict[str, str]]:
    """EdNet-Contents ``questions.csv``: question_id -> its bundle, answer, tags and part."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ("question_id",) + QUESTION_COLUMNS[:3] if c not in (reader.fieldnames or ())]
        if missing:
            raise DatasetFormatError(f"{path}: missing column(s) {missing}; is this EdNet's questions.csv?")
        return {row["question_id"].strip(): {c: (row.get(c) or "").strip() for c in QUESTION_COLUMNS}
                for row in reader}


def find_questions(user_file: Path) -> Path | None:
    """``questions.csv`` beside the user file, or in EdNet's ``contents/`` folder next to its folder."""
    for candidate in (user_file.parent / "questions.csv", user_file.parent.parent / "contents" / "questions.csv"):
        if candidate.is_file():
            return candidate
    return None


def user_files(inputs: PathLike | Iterable[PathLike]) -> list[Path]:
    """Expand folders into their KT1 user files (``u<id>.csv`` / ``_u<id>.csv``), sorted by name."""
    files: list[Path] = []
    for path in as_paths(inputs):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if USER_FILE.match(p.name))
            if not found:
                raise DatasetFormatError(f"{path}: no EdNet KT1 user files (u<id>.csv) in this folder")
            files.extend(found)
        else:
            files.append(path)
    return files


def ednet_kt1_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
                     questions: str | PathLike | None = "auto") -> Iterator[dict[str, Any]]:
    """Stream canonical event records from EdNet KT1 user files.

    Parameters
    ----------
    inputs
        User files, or folders holding them.
    stats
        Filled while the records are consumed; ``duplicate_rows`` counts rows
        repeating an earlier (timestamp, question_id) of the same user.
    questions
        ``"auto"`` (``questions.csv`` found beside the inputs, else the columns
        joined into the user files), a path to ``questions.csv``, or ``None``
        to use only the user files' own columns.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "questions.csv").write_text(
    ...     "question_id,bundle_id,explanation_id,correct_answer,part,tags,deployed_at\\n"
    ...     "q1,b1,e1,b,1,1;2,0\\nq2,b2,e2,a,1,-1,0\\n")
    >>> _ = (folder / "u7.csv").write_text(
    ...     "timestamp,solving_id,question_id,user_answer,elapsed_time\\n"
    ...     "1565096190868,2,q2,a,24000\\n1565096151000,1,q1,c,38000\\n")
    >>> [(r["item_id"], r["concept_ids"], r["response"], r["step_id"]) for r in ednet_kt1_events(folder)]
    [('q1', ['1', '2'], 0, 'b1:1'), ('q2', [], 1, 'b2:2')]
    """
    stats = stats if stats is not None else ConversionStats("ednet-kt1")
    tables: dict[Path, dict[str, dict[str, str]]] = {}
    for path in user_files(inputs):
        source = find_questions(path) if questions == "auto" else (Path(questions) if questions else None)
        if source is not None and source not in tables:
            tables[source] = load_questions(source)
        stats.notes.setdefault("questions", str(source) if source else "columns of the user files")
        yield from _file_events(path, tables.get(source) if source else None, stats)


def _file_events(path: Path, table: dict[str, dict[str, str]] | None,
                 stats: ConversionStats) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip().lower() for h in next(reader, [])]
        col = {name: i for i, name in enumerate(header)}
        missing = [c for c in REQUIRED if c not in col]
        if table is None:
            missing += [c for c in QUESTION_COLUMNS[:3] if c not in col]
        if missing:
            raise DatasetFormatError(f"{path}: missing column(s) {missing}"
                                     + ("" if table is not None else "; pass questions=<EdNet questions.csv>"))
        by_learner: dict[str, list[tuple]] = {}
        for index, row in enumerate(reader):
            if not row:
                continue
            where = f"{path}:{reader.line_num}"
            stats.rows_in += 1
            qid = row[col["question_id"]].strip()
            meta = table.get(qid) if table is not None else None
            if meta is None:
                if table is not None and "correct_answer" not in col:
                    raise DatasetFormatError(f"{where}: question {qid!r} is not in the question table")
                meta = {c: row[col[c]].strip() if c in col else "" for c in QUESTION_COLUMNS}
            user = row[col["user_id"]].strip() if "user_id" in col else ""
            answer = row[col["user_answer"]].strip()
            response = int(answer == meta["correct_answer"])
            if "correct" in col and row[col["correct"]].strip() and \
                    parse_int(row[col["correct"]], "correct", where) != response:
                stats.note("correct_column_disagrees")
            elapsed = row[col["elapsed_time"]].strip() if "elapsed_time" in col else ""
            by_learner.setdefault(user or path.stem.lstrip("_"), []).append((
                parse_int(row[col["timestamp"]], "timestamp", where),
                parse_int(row[col["solving_id"]], "solving_id", where),
                index, qid, response, answer, meta,
                parse_int(elapsed, "elapsed_time", where) if elapsed else None))
    parsed: dict[tuple[str, str, str], tuple[tuple[str, ...], int | None, str]] = {}
    for user, rows in by_learner.items():
        learner = fit_id(user, stats)
        stats.start_learner(learner, str(path))
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
        seen: set[tuple[int, str]] = set()
        for seq, (timestamp, solving_id, index, qid, response, answer, meta, elapsed) in enumerate(rows):
            if (timestamp, qid) in seen:
                stats.duplicate_rows += 1
            seen.add((timestamp, qid))
            key = (meta["tags"], meta.get("part") or "", meta["bundle_id"])
            if key not in parsed:  # the same few thousand questions recur: parse each once
                parsed[key] = _question_fields(*key, stats, str(path))
            tags, part, bundle = parsed[key]
            if not tags:
                stats.note("rows_without_tags")
            if elapsed is not None and elapsed < 0:
                stats.note("negative_elapsed_time_dropped")
                elapsed = None
            attrs: dict[str, Any] = {}
            if answer:
                attrs["user_answer"] = answer
            if part is not None:
                attrs["part"] = part
            rec = event_record(f"{learner}:{index}", learner, fit_id(qid, stats), list(tags), response, seq=seq,
                               event_time=timestamp, step_id=fit_id(f"{bundle}:{solving_id}", stats),
                               elapsed_ms=elapsed, attributes=attrs)
            stats.observe(rec)
            yield rec


def _question_fields(tags: str, part: str, bundle: str, stats: ConversionStats,
                     where: str) -> tuple[tuple[str, ...], int | None, str]:
    """A question's concepts (``-1`` = none), TOEIC part and bundle id, parsed from its text fields."""
    concepts = [fit_id(t, stats) for t in (t.strip() for t in tags.split(";")) if t and t != NO_TAG]
    return (tuple(check_concepts(concepts, where)), parse_int(part, "part", where) if part else None,
            clean_id(bundle))
