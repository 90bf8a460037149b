"""Multi-concept questions expanded into repeated rows: detect them, group them, label figures.

ASSISTments logs a problem tagged with several skills as one row per skill,
with the same response. Kept as separate interactions, every row after the
first "predicts" a response the model was just shown; pyKT scored about 0.64
AUC on random labels this way. A row is an expanded repeat when, within one
learner, it follows a row of the same item with the same response and brings a
concept the run so far lacks (the rule the ``akt`` converter merges by; a
repeat with no new concept is a genuine second attempt). Two items unknown
to the vocabulary (id 1) are never taken for the same item.

Files without problem ids (the DKVMN and DKT-CSV copies of ASSISTments 2009,
whose "item" is the skill) are read by the pattern the copies leave instead
(`copied_answer_rows`): within a learner, consecutive rows of different skills
with the same response. Genuine consecutive answers agree often, but not
always; a pair of skills tagged on one problem (skill a, then skill b, the
response copied) agrees every time. An ordered pair of row signatures
(concepts, else item) is taken for a co-tagged pair when it occurs at least
``MIN_PAIR_COUNT`` times, its responses agree in at least ``MIN_AGREEMENT`` of
them, and that agreement is beyond chance at ``1e-6`` given the data's own
agreement rate between consecutive rows of different skills (binomial tail).
Its second rows with the copied response are counted as repeats. The count is
a lower bound: a pair seen less often, or also met between problems, is missed.

>>> from ktstream.data.histories import LearnerHistory
>>> h = LearnerHistory("u", np.array([5, 5, 8, 8]), np.array([[7], [9], [7], [7]]), np.array([1, 1, 0, 0]),
...                    np.full(4, np.nan), np.arange(4), ["a", "b", "c", "d"])
>>> interaction_groups(h).tolist()   # row 1 repeats row 0 with a new concept; row 3 is a second attempt
[0, 0, 2, 3]
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
from scipy.stats import binom

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


MIN_PAIR_COUNT = 20
MIN_AGREEMENT = 0.97
CHANCE = 1e-6


def _signatures(h: LearnerHistory) -> list[tuple[int, ...]]:
    """Per row: its concepts (sorted, padding dropped), else its item."""
    return [tuple(sorted(int(c) for c in row if c > 0)) or (-int(item),) for item, row in zip(h.items, h.concepts)]


def _pairs(histories: Sequence[LearnerHistory]):
    """(learner index, row, (previous signature, signature), same response) for consecutive answered rows of
    different signatures."""
    for k, h in enumerate(histories):
        sig = _signatures(h)
        for i in range(1, len(h)):
            if sig[i] != sig[i - 1] and h.responses[i] >= 0 and h.responses[i - 1] >= 0:
                yield k, i, (sig[i - 1], sig[i]), bool(h.responses[i] == h.responses[i - 1])


def copied_answer_rows(histories: Sequence[LearnerHistory], learn_from: Sequence[LearnerHistory] | None = None
                       ) -> list[np.ndarray]:
    """Per learner, a boolean array: rows that repeat the answer of a co-tagged skill's row just before
    (found without problem ids; see the module docstring). The co-tagged pairs are learnt from
    ``learn_from`` (default: the histories themselves; a small test split learns them from all splits)."""
    seen, agree = Counter(), Counter()
    for _, _, pair, same in _pairs(histories if learn_from is None else learn_from):
        seen[pair] += 1
        agree[pair] += same
    total = sum(seen.values())
    base = sum(agree.values()) / total if total else 0.0
    cotagged = {p for p, n in seen.items() if n >= MIN_PAIR_COUNT and agree[p] >= MIN_AGREEMENT * n
                and base < 1.0 and binom.sf(agree[p] - 1, n, base) < CHANCE}
    out = [np.zeros(len(h), dtype=bool) for h in histories]
    if cotagged:
        for k, i, pair, same in _pairs(histories):
            out[k][i] = same and pair in cotagged
    return out


def repeated_rows(histories: Sequence[LearnerHistory], learn_from: Sequence[LearnerHistory] | None = None
                  ) -> tuple[int, int]:
    """(rows that repeat an answer, all rows): expanded repeats of the same item, and copied answers of
    co-tagged skills where there are no problem ids (pairs learnt from ``learn_from``)."""
    copied = copied_answer_rows(histories, learn_from)
    repeats = sum(int(((interaction_groups(h) != np.arange(len(h))) | c).sum()) for h, c in zip(histories, copied))
    return repeats, sum(len(h) for h in histories)


def data_label(share: float) -> str:
    """How a figure computed on this data must be described."""
    if share > 0:
        return f"rows as given (includes {100 * share:.1f}% expanded multi-concept rows); not question-level"
    return "question-level interactions (no expanded multi-concept rows found)"


def answer_repeat_warning(histories: Sequence[LearnerHistory], split: str, known: Sequence[str] = (),
                          bound: float = 0.01, learn_from: Sequence[LearnerHistory] | None = None) -> dict:
    """What a results file says about repeated answers in the rows its figures are computed on: counts, the
    known copies the files are, and a warning (None when the share is within ``bound`` and no file is known)."""
    repeats, rows = repeated_rows(histories, learn_from)
    share = repeats / rows if rows else 0.0
    warning = None
    if share > bound or known:
        found = (f"{repeats} of {rows} {split} rows ({100 * share:.1f}%) repeat the answer of the row before "
                 "(same problem, or skills tagged on one problem)")
        warning = ("figures computed on rows that may repeat answers: " + "; ".join([found, *known]) +
                   ". Not question-level: compare only with published figures on the same rows as given.")
    return {"split": split, "rows": rows, "repeated_rows": repeats, "share": round(share, 4),
            "known_files": list(known), "warning": warning}


def repeated_rows_check(data: GateData, cfg: GateConfig) -> CheckResult:
    repeats, rows = 0, 0
    per_split = {}
    everything = [h for hs in data.splits().values() for h in hs]  # co-tagged skills learnt from every split
    for name, hs in data.splits().items():
        r, n = repeated_rows(hs, everything)
        per_split[name] = round(r / n, 4) if n else 0.0
        repeats, rows = repeats + r, rows + n
    if rows == 0:
        return CheckResult.not_applicable("repeated_rows", "no data given")
    share = repeats / rows
    detail = (f"{repeats} of {rows} rows repeat the answer of the row before (same item and response, new "
              "concept; or, without problem ids, a co-tagged skill's copied response): merge them into one "
              "interaction (akt converter default)" if share > cfg.max_repeated_share
              else f"{repeats} of {rows} rows; label: {data_label(share)}")
    return CheckResult.judge("repeated_rows", share, cfg.max_repeated_share, share <= cfg.max_repeated_share,
                             "share of expanded repeat rows <= bound", detail, per_split=per_split,
                             label=data_label(share))
