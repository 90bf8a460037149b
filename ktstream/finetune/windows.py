"""Time-ordered replay: the three windows of a fine-tuning cycle, cut by event time (invariant 5).

Given a cutoff C and a horizon H (epoch milliseconds):

- training: every event with event time < C;
- selection (early stopping): events in [C, C+H), each predicted with the
  learner's whole earlier history as context (``select`` holds events < C+H,
  ``select_scored`` marks the ones scored);
- promotion: events in [C+H, C+2H), likewise (``judge``, ``judge_scored``).

Vocabularies (and so every id a model can tell apart) come from events < C
only: ids first seen later encode as unknown (index 1). With a ``base``
vocabulary (the serving model's), ids first seen before C are appended after
its ids, so the base model's rows keep their indices (see ``warmstart``).

The loader *enforces* the cut: `assert_before` checks the event time of every
position of every training history and raises `LeakageError` on one at or
after C (or without a clock); `build_windows` calls it where it builds the
training histories, and fine-tuning calls it again on the exact list it hands
to the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa

from ktstream.data.columnar import (ArrowIds, ScanConfig, connect, encode_table, first_seen, learner_tables,
                                   scan)
from ktstream.data.histories import (LearnerHistory, assert_before, build_vocabularies, count_before, encode,
                                     part)
from ktstream.data.vocab import Vocabulary
from ktstream.finetune.exceptions import FinetuneError
from ktstream.finetune.stream import ArchiveTrainingData


def extend_vocabulary(base: Vocabulary | None, ids: Iterable[str]) -> Vocabulary:
    """``base``'s ids, then the new ones in first-seen order (a fresh vocabulary without a base).

    >>> extend_vocabulary(Vocabulary(["q1"]), ["q2", "q1", "q3"]).ids
    ['q1', 'q2', 'q3']
    """
    known = list(base.ids) if base is not None else []
    seen = dict.fromkeys(known)
    for x in ids:
        seen.setdefault(x, None)
    return Vocabulary(list(seen))


@dataclass
class TimeWindows:
    cutoff_ms: int
    horizon_ms: int
    items: Vocabulary
    concepts: Vocabulary
    n_categories: int
    train: list[LearnerHistory]  # or an ArchiveTrainingData (``build_windows_from_archive(train_buffer_events=)``)
    select: list[LearnerHistory]
    select_scored: list[np.ndarray]
    judge: list[LearnerHistory]
    judge_scored: list[np.ndarray]
    counts: dict[str, Any] = field(default_factory=dict)

    def window(self) -> dict[str, Any]:
        """The data window as recorded in the registry (C, H, counts)."""
        return {"cutoff_ms": self.cutoff_ms, "horizon_ms": self.horizon_ms, **self.counts}


def _scored(histories: list[LearnerHistory], from_ms: int) -> list[np.ndarray]:
    return [h.times >= from_ms / 1000.0 for h in histories]


def build_windows(records: Iterable[dict[str, Any]], cutoff_ms: int, horizon_ms: int,
                 base: tuple[Vocabulary, Vocabulary] | None = None, n_categories: int | None = None) -> TimeWindows:
    """Cut ``records`` (any order) into the three windows; vocabularies from events < cutoff only."""
    if horizon_ms <= 0:
        raise ValueError(f"horizon must be positive, got {horizon_ms} ms")
    C, H = cutoff_ms, horizon_ms
    recs = [r for r in records if r.get("event_time") is None or r["event_time"] < C + 2 * H]
    if any(r.get("event_time") is None for r in recs):
        raise FinetuneError("time-ordered replay needs an event_time on every event")
    before = [r for r in recs if r["event_time"] < C]
    if not before:
        raise FinetuneError(f"no events before the cutoff {C}")
    if base is None:
        items, concepts = build_vocabularies(before)
    else:
        items = extend_vocabulary(base[0], (r["item_id"] for r in before))
        concepts = extend_vocabulary(base[1], (c for r in before for c in r.get("concept_ids") or ()))
    train = encode(before, items, concepts)
    assert_before(train, C, "training")
    select = encode([r for r in recs if r["event_time"] < C + H], items, concepts)
    judge = encode(recs, items, concepts)
    assert_before(select, C + H, "selection")
    seen_k = 1 + max(r.get("response", 0) for r in before)
    data = TimeWindows(C, H, items, concepts, n_categories or max(2, seen_k), train, select, _scored(select, C),
                      judge, _scored(judge, C + H))
    data.counts = {"train_events": len(before), "select_events": int(sum(s.sum() for s in data.select_scored)),
                   "judge_events": int(sum(s.sum() for s in data.judge_scored)), "learners": len(judge),
                   "items": len(items) - 2, "concepts": len(concepts) - 2,
                   "new_items": len(items) - (len(base[0]) if base else 2),
                   "new_concepts": len(concepts) - (len(base[1]) if base else 2)}
    return data


def archive_vocabularies(folder, cutoff_ms: int, files_end_ms: int, base: tuple[Vocabulary, Vocabulary] | None,
                         con=None) -> tuple[Vocabulary, Vocabulary]:
    """Item and concept vocabularies of the archive's events < cutoff (``base``'s ids first), as
    `build_windows` builds them from the same records."""
    item_ids, concept_ids = first_seen(folder, cutoff_ms, con=con, files_end_ms=files_end_ms)
    if not item_ids:
        raise FinetuneError(f"no events before the cutoff {cutoff_ms}")
    if base is None:
        return Vocabulary(item_ids), Vocabulary(concept_ids)
    return extend_vocabulary(base[0], item_ids), extend_vocabulary(base[1], concept_ids)


def build_windows_from_archive(folder, cutoff_ms: int, horizon_ms: int,
                               base: tuple[Vocabulary, Vocabulary] | None = None, n_categories: int | None = None,
                               cfg: ScanConfig | None = None, max_events: int = 1_000_000,
                               train_buffer_events: int | None = None) -> TimeWindows:
    """``build_windows(read_archive(folder, end_ms=C + 2H), ...)`` read in columns: the same windows, built
    learner by learner from tables of about ``max_events`` rows (DuckDB sorts within ``cfg``'s memory).

    With ``train_buffer_events`` the training window is not held: ``train`` is an `ArchiveTrainingData`
    that reads it again, in buffers of about that many positions, each time it is batched or iterated, and
    ``select`` / ``judge`` hold only the learners with events in their scored windows (the others add
    nothing to either metric). Memory is then DuckDB's limit, one buffer, and the histories of the
    learners active in [C, C+2H), whatever the archive's size."""
    if horizon_ms <= 0:
        raise ValueError(f"horizon must be positive, got {horizon_ms} ms")
    C, H = cutoff_ms, horizon_ms
    streamed = train_buffer_events is not None
    con = connect(cfg)
    items, concepts = archive_vocabularies(folder, C, C + 2 * H, base, con)
    train, select, judge, max_k, n_before, n_learners = [], [], [], 0, 0, 0
    for table in learner_tables(scan(folder, end_ms=C + 2 * H, order="learner", cfg=cfg, con=con), max_events):
        for h in encode_table(table, items, concepts, arrow_ids=streamed):
            n_learners += 1
            n_train, n_select = count_before(h, C), count_before(h, C + H)
            if n_train:
                max_k = max(max_k, int(h.responses[:n_train].max()))
                n_before += n_train
            if streamed:
                if n_train == len(h):
                    continue  # nothing scored in either window
                h = owned(h)  # not a view of the table's columns, which would keep them all alive
                if n_select > n_train:
                    select.append(h if n_select == len(h) else part(h, 0, n_select))
                if len(h) > n_select:
                    judge.append(h)
                continue
            judge.append(h)
            if n_select:
                select.append(h if n_select == len(h) else part(h, 0, n_select))
            if n_train:
                train.append(h if n_train == len(h) else part(h, 0, n_train))
    for window in (train, select, judge):  # learner id order, as `build_windows` (the scan orders by group)
        window.sort(key=lambda h: h.learner_id)
    if streamed:
        train = ArchiveTrainingData(folder, C, items, concepts, segment=None, budget_events=train_buffer_events,
                                    cfg=cfg, table_events=max_events, events=n_before)
    else:
        assert_before(train, C, "training")
    assert_before(select, C + H, "selection")
    data = TimeWindows(C, H, items, concepts, n_categories or max(2, 1 + max_k), train, select, _scored(select, C),
                       judge, _scored(judge, C + H))
    data.counts = {"train_events": n_before, "select_events": int(sum(s.sum() for s in data.select_scored)),
                   "judge_events": int(sum(s.sum() for s in data.judge_scored)), "learners": n_learners,
                   "items": len(items) - 2, "concepts": len(concepts) - 2,
                   "new_items": len(items) - (len(base[0]) if base else 2),
                   "new_concepts": len(concepts) - (len(base[1]) if base else 2)}
    return data


def owned(h: LearnerHistory) -> LearnerHistory:
    """A copy of ``h`` that owns its arrays and event ids: a history read from the archive is a view of its
    whole table, which a view kept after the table is read would keep alive. Arrow ids stay in an Arrow
    array of their own (a Python string in a list costs about 50 bytes more per id)."""
    ids = ArrowIds(pa.concat_arrays([h.event_ids.arrow()])) if isinstance(h.event_ids, ArrowIds) else list(h.event_ids)
    return LearnerHistory(h.learner_id, h.items.copy(), h.concepts.copy(), h.responses.copy(), h.times.copy(),
                          h.step_start.copy(), ids)


def window_only(histories: Sequence[LearnerHistory], scored: Sequence[np.ndarray]) -> list[LearnerHistory]:
    """The scored tail of each history as a history of its own (for the gate's disjoint splits)."""
    out = []
    for h, s in zip(histories, scored):
        idx = np.flatnonzero(s)
        if len(idx):
            out.append(h.slice(int(idx[0]), len(h)))
    return out
