"""Ordered (partial-credit) outcomes derived from binary tutor logs that record help and errors.

No public polytomous KT data set could be obtained, but tutor logs say more than
right/wrong: whether the learner erred, asked for hints, or was shown the
answer. These converters read the logs with the plain converters
(`assistments_raw_events`, `datashop_events`), replace ``response`` by an
ordered category and keep the binary outcome in ``attributes["correct"]``.

Rules (K=4; ``categories=3`` merges the two lowest levels into 0 "needed help"):

ASSISTments skill-builder rows (``correct``, ``hint_count``, ``bottom_hint``, ``first_action``)
    3  correct on the first attempt (``correct`` = 1; a hint or a scaffolding
       request as first action makes ``correct`` 0, so no help came first);
    2  wrong first attempt, no hint and no scaffolding request;
    1  help short of the answer: hints without the bottom-out hint
       (``bottom_hint`` 0 or absent), or the scaffolding breakdown asked for
       first (``first_action`` = 2);
    0  the bottom-out hint was shown (``hint_count`` >= 1 and ``bottom_hint`` = 1):
       the tutor gave the answer away.
DataShop student-step rows (``Correct First Attempt``, ``Hints``, ``Corrects``)
    3  correct first attempt (DataShop counts a hint request as an attempt);
    2  solved in the step after errors, without hints;
    1  solved in the step with hints;
    0  not solved in the step (``Corrects`` = 0).

>>> assistments_category({"correct": 0, "hint_count": 2, "bottom_hint": 1}), assistments_category({"correct": 1})
(0, 3)
>>> datashop_category(0, {"hints": 1, "corrects": 1}), datashop_category(0, {"hints": 1, "corrects": 1}, 3)
(1, 0)
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from connectors.datasets.assistments_raw import assistments_raw_events
from connectors.datasets.datashop import datashop_events
from connectors.datasets.records import PathLike
from connectors.datasets.stats import ConversionStats

ASSISTMENTS_RULE = ("3 correct first attempt; 2 wrong first attempt, no help; 1 hints without the bottom-out hint "
                    "or scaffolding asked first; 0 bottom-out hint shown")
DATASHOP_RULE = ("3 correct first attempt; 2 solved after errors without hints; 1 solved with hints; "
                 "0 not solved in the step")


def _levels(category: int, categories: int) -> int:
    if categories not in (3, 4):
        raise ValueError(f"categories must be 3 or 4, got {categories}")
    return category if categories == 4 else max(category - 1, 0)


def assistments_category(row: dict[str, Any], categories: int = 4) -> int:
    """Ordered outcome of one ASSISTments row from ``correct`` and the help attributes."""
    if row.get("hint_count", 0) >= 1:
        level = 0 if row.get("bottom_hint") == 1 else 1
    elif row.get("first_action") == 2:
        level = 1
    else:
        level = 3 if row["correct"] >= 1 else 2
    return _levels(level, categories)


def datashop_category(correct_first: int, counts: dict[str, int], categories: int = 4) -> int:
    """Ordered outcome of one DataShop step from Correct First Attempt, Hints and Corrects."""
    if correct_first >= 1:
        level = 3
    elif counts.get("corrects", 0) == 0:
        level = 0
    else:
        level = 1 if counts.get("hints", 0) >= 1 else 2
    return _levels(level, categories)


def _derive(records: Iterator[dict[str, Any]], inner: ConversionStats, stats: ConversionStats, rule: str,
            categories: int, category: Callable[[dict[str, Any]], int]) -> Iterator[dict[str, Any]]:
    stats.notes["ordinal_rule"] = rule if categories == 4 else rule + " (categories=3: levels 0 and 1 merged)"
    for rec in records:
        attrs = dict(rec.get("attributes") or {})
        attrs["correct"] = rec["response"]
        out = {**rec, "response": category(rec | {"attributes": attrs}), "attributes": attrs}
        stats.observe(out)
        yield out
    stats.rows_in, stats.rows_merged, stats.duplicate_rows = inner.rows_in, inner.rows_merged, inner.duplicate_rows
    stats.notes.update(inner.notes)


def assistments_ordinal_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
                               categories: int = 4) -> Iterator[dict[str, Any]]:
    """Raw ASSISTments skill-builder rows -> events with the ordered response of ASSISTMENTS_RULE."""
    _levels(0, categories)
    stats = stats if stats is not None else ConversionStats("assistments-ordinal")
    inner = ConversionStats("assistments-raw")
    return _derive(assistments_raw_events(inputs, inner), inner, stats, ASSISTMENTS_RULE, categories,
                   lambda r: assistments_category({"correct": r["attributes"]["correct"], **r["attributes"]},
                                                  categories))


def datashop_ordinal_events(inputs: PathLike | Iterable[PathLike], stats: ConversionStats | None = None, *,
                            categories: int = 4, kc_column: str | None = None) -> Iterator[dict[str, Any]]:
    """DataShop student-step rows -> events with the ordered response of DATASHOP_RULE."""
    _levels(0, categories)
    stats = stats if stats is not None else ConversionStats("datashop-ordinal")
    inner = ConversionStats("datashop")
    return _derive(datashop_events(inputs, inner, kc_column=kc_column), inner, stats, DATASHOP_RULE, categories,
                   lambda r: datashop_category(r["attributes"]["correct"], r["attributes"], categories))
