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
from typing import Iterable, Iterator, Sequence

import numpy as np
from scipy.stats import binom

from ktstream.data.histories import LearnerHistory
from ktstream.data.vocab import UNKNOWN
from ktstream.leakage.config import GateConfig, GateData
from ktstream.leakage.report import CheckResult


def interaction_groups(h: LearnerHistory) -> np.ndarray:
    """For every row, the index of the first row of the interaction it belongs to (T,).

    Only a row that repeats the item and response of the row before can join its interaction; those rows
    are walked in order (the concepts the run so far holds decide), every other row starts its own."""
    first = np.arange(len(h))
    candidate = np.zeros(len(h), bool)
    candidate[1:] = (h.items[1:] > UNKNOWN) & (h.items[1:] == h.items[:-1]) & (h.responses[1:] == h.responses[:-1])
    run: set[int] = set()
    previous = -2
    for i in np.flatnonzero(candidate).tolist():
        if i - 1 != previous:  # the row before started its own interaction: the run is its concepts
            run = {int(c) for c in h.concepts[i - 1] if c > 0}
        concepts = {int(c) for c in h.concepts[i] if c > 0}
        if not concepts <= run:
            first[i] = first[i - 1]
            run |= concepts
        else:
            run = concepts
        previous = i
    return first


MIN_PAIR_COUNT = 20
MIN_AGREEMENT = 0.97
CHANCE = 1e-6


def _chunks(histories: Iterable[LearnerHistory], rows: int = 1 << 16) -> Iterator[list[LearnerHistory]]:
    """Consecutive histories in lists of about ``rows`` rows: the unit the pair statistics are computed on."""
    chunk, size = [], 0
    for h in histories:
        chunk.append(h)
        size += len(h)
        if size >= rows:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _transitions(hs: list[LearnerHistory]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over ``hs`` stacked: consecutive answered rows of one learner with different signatures (a row's
    signature: its concepts, sorted, padding dropped; else its item). Returns (the second rows, a code per
    ordered pair of signatures, same response, the signatures: code = first * count + second)."""
    lengths = np.array([len(h) for h in hs])
    starts = np.cumsum(lengths) - lengths
    concepts = np.zeros((int(lengths.sum()), max(h.concepts.shape[1] for h in hs)), np.int64)
    for h, at in zip(hs, starts.tolist()):
        concepts[at:at + len(h), :h.concepts.shape[1]] = h.concepts
    items = np.concatenate([h.items for h in hs])
    responses = np.concatenate([h.responses for h in hs])
    concepts = np.sort(np.where(concepts > 0, concepts, 0), axis=1)
    key = np.column_stack([concepts, np.where((concepts > 0).any(1), 0, -items)])
    signatures, index = np.unique(key, axis=0, return_inverse=True)
    index = index.reshape(-1)
    follows = np.ones(len(index), bool)
    follows[starts] = False
    rows = np.flatnonzero(follows[1:] & (index[1:] != index[:-1]) & (responses[1:] >= 0) & (responses[:-1] >= 0)) + 1
    same = responses[rows] == responses[rows - 1]
    return rows, index[rows - 1] * len(signatures) + index[rows], same, signatures


def _pair(code: int, signatures: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    def signature(key: np.ndarray) -> tuple[int, ...]:
        return tuple(int(c) for c in key[:-1] if c > 0) or (int(key[-1]),)

    return signature(signatures[code // len(signatures)]), signature(signatures[code % len(signatures)])


def cotagged_pairs(histories: Iterable[LearnerHistory]) -> set:
    """The ordered pairs of row signatures taken for skills tagged on one problem (see the module docstring)."""
    seen, agree = Counter(), Counter()
    for hs in _chunks(histories):
        rows, codes, same, signatures = _transitions(hs)
        pairs, where, counts = np.unique(codes, return_inverse=True, return_counts=True)
        agreeing = np.bincount(where.reshape(-1), weights=same, minlength=len(pairs))
        for code, n, a in zip(pairs.tolist(), counts.tolist(), agreeing.tolist()):
            pair = _pair(code, signatures)
            seen[pair] += n
            agree[pair] += int(a)
    total = sum(seen.values())
    base = sum(agree.values()) / total if total else 0.0
    return {p for p, n in seen.items() if n >= MIN_PAIR_COUNT and agree[p] >= MIN_AGREEMENT * n
            and base < 1.0 and binom.sf(agree[p] - 1, n, base) < CHANCE}


def _copied(hs: list[LearnerHistory], cotagged: set) -> np.ndarray:
    """Over ``hs`` stacked: the rows that copy a co-tagged skill's answer."""
    out = np.zeros(sum(len(h) for h in hs), dtype=bool)
    if cotagged:
        rows, codes, same, signatures = _transitions(hs)
        pairs, where = np.unique(codes, return_inverse=True)
        member = np.array([_pair(code, signatures) in cotagged for code in pairs.tolist()], bool)
        out[rows] = same & member[where.reshape(-1)]
    return out


def copied_answer_rows(histories: Sequence[LearnerHistory], learn_from: Iterable[LearnerHistory] | None = None
                       ) -> list[np.ndarray]:
    """Per learner, a boolean array: rows that repeat the answer of a co-tagged skill's row just before
    (found without problem ids; see the module docstring). The co-tagged pairs are learnt from
    ``learn_from`` (default: the histories themselves; a small test split learns them from all splits)."""
    cotagged = cotagged_pairs(histories if learn_from is None else learn_from)
    out = []
    for hs in _chunks(histories):
        out += np.split(_copied(hs, cotagged), np.cumsum([len(h) for h in hs])[:-1])
    return out


def repeated_rows(histories: Iterable[LearnerHistory], learn_from: Iterable[LearnerHistory] | None = None,
                  cotagged: set | None = None) -> tuple[int, int]:
    """(rows that repeat an answer, all rows): expanded repeats of the same item, and copied answers of
    co-tagged skills where there are no problem ids (pairs learnt from ``learn_from``, or given as
    ``cotagged``). One pass over ``histories`` after the pairs are learnt: a streamed split is never held."""
    if cotagged is None:
        cotagged = cotagged_pairs(histories if learn_from is None else learn_from)
    repeats = rows = 0
    for hs in _chunks(histories):
        expanded = np.concatenate([interaction_groups(h) != np.arange(len(h)) for h in hs])
        repeats += int((expanded | _copied(hs, cotagged)).sum())
        rows += len(expanded)
    return repeats, rows


class Chained:
    """Several splits read as one re-iterable sequence of histories (a streamed split stays streamed)."""

    def __init__(self, *splits: Iterable[LearnerHistory]):
        self.splits = splits

    def __iter__(self) -> Iterator[LearnerHistory]:
        for split in self.splits:
            yield from split


def data_label(share: float) -> str:
    """How a figure computed on this data must be described."""
    if share > 0:
        return f"rows as given (includes {100 * share:.1f}% expanded multi-concept rows); not question-level"
    return "question-level interactions (no expanded multi-concept rows found)"


def answer_repeat_warning(histories: Sequence[LearnerHistory], split: str, known: Sequence[str] = (),
                          bound: float = 0.01, learn_from: Sequence[LearnerHistory] | None = None,
                          cotagged: set | None = None) -> dict:
    """What a results file says about repeated answers in the rows its figures are computed on: counts, the
    known copies the files are, and a warning (None when the share is within ``bound`` and no file is known).
    Co-tagged pairs as `repeated_rows` takes them (learnt from ``learn_from``, or given)."""
    repeats, rows = repeated_rows(histories, learn_from, cotagged)
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
    cotagged = cotagged_pairs(Chained(*data.splits().values()))  # co-tagged skills learnt from every split
    for name, hs in data.splits().items():
        r, n = repeated_rows(hs, cotagged=cotagged)
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
