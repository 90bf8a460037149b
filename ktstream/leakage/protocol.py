"""Evaluation protocol, part 1: how the splits were cut, and what the vocabularies were built from.

- `split_disjoint`: no event is in two splits; under the learner protocol no
  learner is either; under the time protocol every training event precedes
  every validation event, which precedes every test event (where clocks exist).
  Validation and test count their scored positions only (context before the
  scored window is the learner's own past, not a second use of it).
- `windowed_after_split`: each split holds one history per learner. Cutting
  histories into windows first and splitting the windows puts one learner's
  past in training and its future in test, or scores it twice.
- `vocab_from_train`: every item / concept id in the validation and test
  splits is a training id or the unknown id (1): a vocabulary built on all the
  data gives test-only ids their own index. With ``n_items`` / ``n_concepts``
  given, every vocabulary entry must occur in training.

The training split may be a stream (a fine-tuning cycle's window read again from the archive on each
pass): these checks read it one pass at a time and never hold its event ids.

>>> from ktstream.data.histories import LearnerHistory
>>> def h(lid, items): return LearnerHistory(lid, np.array(items), np.ones((len(items), 1), int) * 2,
...                                         np.zeros(len(items), int), np.full(len(items), np.nan),
...                                         np.arange(len(items)), [f"{lid}-{i}" for i in range(len(items))])
>>> vocab_from_train(GateData([h("a", [2, 3])], [h("b", [2, 1])], [h("c", [4])])).figure  # item 4: test only
1.0
"""

from __future__ import annotations

import numpy as np

from ktstream.data.vocab import UNKNOWN
from ktstream.leakage.config import GateConfig, GateData
from ktstream.leakage.report import CheckResult


def _ids(histories, attr: str):
    if attr == "learner_id":
        return (h.learner_id for h in histories)
    return (e for h in histories for e in h.event_ids if e)


def _own_ids(h, attr: str):
    return (h.learner_id,) if attr == "learner_id" else h.event_ids


def split_disjoint(data: GateData, cfg: GateConfig | None = None) -> CheckResult:
    splits = {k: data.scored(k) for k in data.splits()}
    if len(splits) < 2:
        return CheckResult.not_applicable("split_disjoint", "fewer than two splits given")
    shared, notes = 0, []
    keys = ["event_id"] + (["learner_id"] if data.split == "learner" else [])
    names = list(splits)
    # ids of every split but the first as sets; each split is read once against the later ones, taking its
    # clock's bounds in the same pass, so the training split (first; it may be streamed from an archive) is
    # read once and never held as a set
    later_ids = {(key, b): set(_ids(splits[b], key)) for key in keys for b in names[1:]}
    found = {(key, a, b): set() for key in keys for i, a in enumerate(names) for b in names[i + 1:]}
    bounds = {}
    for i, a in enumerate(names):
        low, high = np.inf, -np.inf
        for h in splits[a]:
            for key in keys:
                ids = _own_ids(h, key)
                for b in names[i + 1:]:
                    found[key, a, b].update(later_ids[key, b].intersection(ids))
            t = h.times[np.isfinite(h.times)]
            if len(t):
                low, high = min(low, float(t.min())), max(high, float(t.max()))
        if high >= low:
            bounds[a] = (low, high)
    for (key, a, b), ids in found.items():
        if ids:
            shared += len(ids)
            notes.append(f"{len(ids)} {key}s in both {a} and {b} (e.g. {sorted(ids)[0]!r})")
    if data.split == "time":
        order = [k for k in ("train", "valid", "test") if k in bounds]
        for a, b in zip(order, order[1:]):
            if bounds[a][1] >= bounds[b][0]:
                shared += 1
                notes.append(f"{a} ends at {bounds[a][1]:.0f} s, after {b} begins at {bounds[b][0]:.0f} s")
        if len(order) < len(splits):
            notes.append("time order not checkable: a split has no clock")
    detail = "; ".join(notes) or f"{data.split} protocol: {', '.join(keys)}s disjoint across {', '.join(splits)}"
    return CheckResult.judge("split_disjoint", shared, 0, shared == 0, "ids shared between splits (+ time "
                             "overlaps) <= bound", detail)


def windowed_after_split(data: GateData, cfg: GateConfig | None = None) -> CheckResult:
    repeated, notes = 0, []
    for name, hs in data.splits().items():
        ids = [h.learner_id for h in hs]
        extra = len(ids) - len(set(ids))
        if extra:
            repeated += extra
            notes.append(f"{name}: {extra} extra histories of learners already in it")
    if not data.splits():
        return CheckResult.not_applicable("windowed_after_split", "no data given")
    return CheckResult.judge("windowed_after_split", repeated, 0, repeated == 0,
                             "histories per learner within a split beyond one <= bound",
                             "; ".join(notes) or "one history per learner in every split")


def vocab_from_train(data: GateData, cfg: GateConfig | None = None) -> CheckResult:
    if not data.train or not (data.valid or data.test):
        return CheckResult.not_applicable("vocab_from_train", "needs a training split and a split to compare")
    figure, notes = 0, []
    kinds = (("item", lambda h: h.items, data.n_items),
             ("concept", lambda h: h.concepts[h.concepts > 0], data.n_concepts))
    in_train: dict[str, set[int]] = {what: set() for what, _, _ in kinds}
    for h in data.train:  # one pass (a streamed training split is read once)
        for what, get, _ in kinds:
            in_train[what].update(np.unique(get(h)).tolist())
    for what, get, size in kinds:
        seen = in_train[what]
        later = {int(x) for hs in (data.valid, data.test) for h in hs for x in np.unique(get(h))}
        foreign = later - seen - {UNKNOWN}
        if foreign:
            figure += len(foreign)
            notes.append(f"{len(foreign)} {what} ids in valid/test never occur in train (e.g. {min(foreign)}): "
                         "vocabulary not built from the training split")
        if size is not None:
            unused = size - 2 - len(seen - {UNKNOWN})
            if unused > 0:
                figure += unused
                notes.append(f"{unused} of {size - 2} {what} vocabulary entries never occur in train")
    return CheckResult.judge("vocab_from_train", figure, 0, figure == 0, "ids not from training <= bound",
                             "; ".join(notes) or "valid/test ids are training ids or unknown (1)")
