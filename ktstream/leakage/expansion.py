"""Multi-concept questions expanded into repeated rows: detect them, group them, label figures.

ASSISTments logs a problem tagged with several skills as one row per skill,
with the same response. Kept as separate interactions, every row after the
first "predicts" a response the model was just shown; pyKT scored about 0.64
AUC on random labels this way. A row is an expanded repeat when, within one
learner, it follows a row of the same item with the same response and brings a
concept the run so far lacks (the rule the ``akt`` converter merges by; a
repeat with no new concept is a genuine second attempt). Detection needs item
ids: files without problem ids (the DKVMN format) cannot be checked, and two
items unknown to the vocabulary (id 1) are never taken for the same item.

>>> from ktstream.data.histories import LearnerHistory
>>> h = LearnerHistory("u", np.array([5, 5, 8, 8]), np.array([[7], [9], [7], [7]]), np.array([1, 1, 0, 0]),
...                    np.full(4, np.nan), np.arange(4), ["a", "b", "c", "d"])
>>> interaction_groups(h).tolist()   # row 1 repeats row 0 with a new concept; row 3 is a second attempt
[0, 0, 2, 3]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ktstream.data.histories import LearnerHistory
from ktstream.data.vocab import UNKNOWN
from ktstream.leakage.config import GateConfig, GateData
from ktstream.leakage.report import CheckResult


def interaction_groups(h: LearnerHistory) -> np.ndarray:
    """For every row, the index of the first row of the interaction it belongs to (T,)."""
    first = np.arange(len(h))
    run: set[int] = set()
    for i in range(len(h)):
        concepts = {int(c) for c in h.concepts[i] if c > 0}
        if (i > 0 and h.items[i] > UNKNOWN and h.items[i] == h.items[i - 1]
                and h.responses[i] == h.responses[i - 1] and not concepts <= run):
            first[i] = first[i - 1]
            run |= concepts
        else:
            run = concepts
    return first


def repeated_rows(histories: Sequence[LearnerHistory]) -> tuple[int, int]:
    """(expanded repeat rows, all rows)."""
    repeats = sum(int((interaction_groups(h) != np.arange(len(h))).sum()) for h in histories)
    return repeats, sum(len(h) for h in histories)


def data_label(share: float) -> str:
    """How a figure computed on this data must be described."""
    if share > 0:
        return f"rows as given (includes {100 * share:.1f}% expanded multi-concept rows); not question-level"
    return "question-level interactions (no expanded multi-concept rows found)"


def repeated_rows_check(data: GateData, cfg: GateConfig) -> CheckResult:
    repeats, rows = 0, 0
    per_split = {}
    for name, hs in data.splits().items():
        r, n = repeated_rows(hs)
        per_split[name] = round(r / n, 4) if n else 0.0
        repeats, rows = repeats + r, rows + n
    if rows == 0:
        return CheckResult.not_applicable("repeated_rows", "no data given")
    share = repeats / rows
    detail = (f"{repeats} of {rows} rows repeat the row before (same item and response, new concept): "
              "merge them into one interaction (akt converter default)" if share > cfg.max_repeated_share
              else f"{repeats} of {rows} rows; label: {data_label(share)}")
    return CheckResult.judge("repeated_rows", share, cfg.max_repeated_share, share <= cfg.max_repeated_share,
                             "share of expanded repeat rows <= bound", detail, per_split=per_split,
                             label=data_label(share))
