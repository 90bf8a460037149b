"""AKT's 4-line format: ``student_index,user_id`` / problem ids / skill ids / responses.

This is how Ghosh et al. (AKT, KDD 2020) ship ASSISTments 2009 with problem ids
(``assist2009_pid``). ASSISTments logs a problem tagged with several skills as
one row per skill, and the preprocessing kept those rows: a two-skill problem
appears as two consecutive positions with the same problem id and the same
response. Taken as two interactions, the second one's answer is the first one's
answer, so any model sees it "predict" a response it was just shown, and AUCs
on such data are inflated (15.7% of the rows of the copy we hold are such
repeats).

So by default those rows are merged into one interaction carrying all their
skills, and `ConversionStats.rows_merged` says how many rows were folded in. A
row is merged into the interaction before it when it has the same problem id,
the same response, and a skill that interaction does not have yet. A repeat
with the same skill is a second attempt at a single-skill problem (22 rows in
the AKT copy), and a repeat with a different response is a second attempt too;
both stay separate interactions.

``keep_repeated_rows=True`` keeps every row as given. Use it only to reproduce
published numbers, and label figures computed from it as "rows as given".

Learners are named by the original ASSISTments ``user_id`` (the second value
of the first line), so the stream joins with the raw ASSISTments data. Items
are the file's problem indices and concepts its skill indices (see the data
set's ``problems.json`` / ``skill.json`` for the original ids and names). The
format has no timestamps: ``event_time`` is absent and ``seq`` is the position.

AKT's folds overlap (``valid{k}`` is ``test{k+1}``, and one learner is in
every train file), so the same learner may come from several inputs: a record
identical to one already converted is skipped and counted in
``stats.notes["duplicate_records_skipped"]``; a different record under the same
learner id is an error.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Iterator

from connectors.datasets.exceptions import DatasetFormatError
from connectors.datasets.multiline import read_blocks
from connectors.datasets.records import PathLike, as_paths, check_concepts, event_record, fit_id, parse_response
from connectors.datasets.stats import ConversionStats


def akt_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
               keep_repeated_rows: bool = False) -> Iterator[dict[str, Any]]:
    """Stream canonical event records from AKT 4-line files.

    Parameters
    ----------
    inputs
        One file or several (e.g. ``train1``, ``valid1`` and ``test1`` together
        hold every learner once).
    stats
        Filled while the records are consumed; ``rows_merged`` counts the rows
        folded into the interaction before them.
    keep_repeated_rows
        Keep multi-skill repeats as separate interactions, as the file gives
        them (only to reproduce published numbers).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "toy_test1.csv"
    >>> _ = path.write_text("1,900\\n5,5,8\\n7,9,7\\n1,1,0\\n")
    >>> s = ConversionStats("akt")
    >>> [(r["item_id"], r["concept_ids"], r["response"]) for r in akt_events(path, s)]
    [('5', ['7', '9'], 1), ('8', ['7'], 0)]
    >>> s.rows_in, s.rows_merged, s.interactions_out
    (3, 1, 2)
    """
    stats = stats if stats is not None else ConversionStats("akt")
    seen: dict[str, str] = {}
    for path in as_paths(inputs):
        for start, block in read_blocks(path, 4):
            head, problems, skills, responses = block
            where = f"{path}:{start}"
            if not head or len(head) > 2:
                raise DatasetFormatError(f"{where}: expected 'student_index,user_id', got {','.join(head)!r}")
            learner = fit_id(head[-1], stats)
            digest = hashlib.sha1(repr(block[1:]).encode()).hexdigest()
            if learner in seen:
                if seen[learner] != digest:
                    raise DatasetFormatError(f"{where}: learner {learner!r} appears again with a different sequence")
                stats.note("duplicate_records_skipped")
                continue
            seen[learner] = digest
            stats.start_learner(learner, where)
            yield from _learner_events(learner, problems, skills, responses, where, keep_repeated_rows, stats)


def _learner_events(learner: str, problems: list[str], skills: list[str], responses: list[str], where: str,
                    keep_repeated_rows: bool, stats: ConversionStats) -> Iterator[dict[str, Any]]:
    """Group one learner's rows into interactions (or keep them), then emit them in order."""
    groups: list[tuple[int, str, int, list[str]]] = []  # (first row, problem, response, skills)
    for row, (p, s, r) in enumerate(zip(problems, skills, responses)):
        stats.rows_in += 1
        response = parse_response(r, where)
        if not keep_repeated_rows and groups:
            _, last_p, last_r, last_skills = groups[-1]
            if p == last_p and response == last_r and s not in last_skills:
                last_skills.append(s)
                stats.rows_merged += 1
                continue
        groups.append((row, p, response, [s]))
    for seq, (row, p, response, group_skills) in enumerate(groups):
        cids = check_concepts([fit_id(s, stats) for s in group_skills], where)
        rec = event_record(f"{learner}:{row}", learner, fit_id(p, stats), cids, response, seq=seq)
        stats.observe(rec)
        yield rec
