"""The DKT paper's simulated "Synthetic-5" data: one line of 0/1 responses per student.

Every simulated student answers the same exercises in the same order, so
column j is exercise j (0-based) and the line number is the student. The
generating concept of each exercise is in the version's info file
(``info/<stem>_info.txt``, 3rd column); it is the hidden truth
the data was simulated from, which is why it can be left out (``info=None``)
for models that are meant to discover concepts themselves.

Learners are ``f"{file_stem}:{line_index}"``; no timestamps (``seq`` = column).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.multiline import split_line
from connectors.datasets.records import PathLike, as_paths, event_record, parse_response
from connectors.datasets.stats import ConversionStats


def load_info(path: str | Path) -> list[str]:
    """Generating concept of each exercise, in exercise order (3rd column).

    The columns are tab-separated in version 0 and comma-separated in the other
    versions of the DKT repository; both are read.
    """
    concepts = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            line = line.strip()
            fields = line.split("\t") if "\t" in line else line.split(",")
            if len(fields) < 3:
                raise DatasetFormatError(f"{path}:{lineno}: expected at least 3 tab- or comma-separated columns")
            concepts.append(str(int(float(fields[2]))))
    return concepts


def _info_for(path: Path, info: str | PathLike | None) -> tuple[list[str] | None, str]:
    if info is None:
        return None, "none"
    if info == "auto":
        found = path.parent / "info" / f"{path.stem}_info.txt"
        return (load_info(found), str(found)) if found.is_file() else (None, "not found")
    return load_info(info), str(info)


def dkt_synthetic_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
                         info: str | PathLike | None = "auto") -> Iterator[dict[str, Any]]:
    """Stream canonical event records from Synthetic-5 files.

    Parameters
    ----------
    inputs
        One version file or several.
    stats
        Filled while the records are consumed.
    info
        ``"auto"`` (``info/<stem>_info.txt`` beside each input; no concepts if
        absent), a path to an info file, or ``None`` for no concepts.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "naive_c5_q3_s2_v0.csv"
    >>> _ = path.write_text("1,0,1\\n0,0,1\\n")
    >>> [(r["learner_id"], r["item_id"], r["response"]) for r in dkt_synthetic_events(path)][2:4]
    [('naive_c5_q3_s2_v0:0', '2', 1), ('naive_c5_q3_s2_v0:1', '0', 0)]
    """
    stats = stats if stats is not None else ConversionStats("dkt-synthetic")
    for path in as_paths(inputs):
        concepts, source = _info_for(path, info)
        stats.notes.setdefault("info", {})[path.name] = source
        with open(path, encoding="utf-8") as fh:
            index = -1
            for lineno, line in enumerate(fh, 1):
                responses = split_line(line)
                if not responses:
                    continue
                index += 1
                where = f"{path}:{lineno}"
                if concepts is not None and len(responses) != len(concepts):
                    raise DatasetFormatError(
                        f"{where}: {len(responses)} responses but the info file describes {len(concepts)} exercises")
                learner = f"{path.stem}:{index}"
                stats.start_learner(learner, where)
                for j, r in enumerate(responses):
                    stats.rows_in += 1
                    rec = event_record(f"{learner}:{j}", learner, str(j),
                                       [concepts[j]] if concepts is not None else [],
                                       parse_response(r, where), seq=j)
                    stats.observe(rec)
                    yield rec
