"""Time-ordered replay: windows cut by event time, vocabularies from before C only."""

from __future__ import annotations

import numpy as np
import pytest

from ktstream.data.vocab import UNKNOWN, Vocabulary
from ktstream.finetune.exceptions import FinetuneError
from ktstream.finetune.windows import build_windows, window_only


def test_windows_are_cut_by_event_time(stream):
    recs, C, H = stream
    data = build_windows(recs, C, H)
    times = np.array([r["event_time"] for r in recs])
    assert data.counts["train_events"] == int((times < C).sum())
    assert data.counts["select_events"] == int(((times >= C) & (times < C + H)).sum())
    assert data.counts["judge_events"] == int(((times >= C + H) & (times < C + 2 * H)).sum())
    assert max(h.times.max() for h in data.train) < C / 1000
    for h, s in zip(data.select, data.select_scored):
        assert (h.times[s] >= C / 1000).all() and (h.times[~s] < C / 1000).all() and h.times.max() < (C + H) / 1000
    for h, s in zip(data.judge, data.judge_scored):
        assert (h.times[s] >= (C + H) / 1000).all() and h.times.max() < (C + 2 * H) / 1000
    # the scored part of a window is a suffix of the learner's history, with the earlier events as context
    assert all(len(w) == int(s.sum()) for w, s in zip(window_only(data.judge, data.judge_scored),
                                                      [s for s in data.judge_scored if s.any()]))


def test_ids_first_seen_after_cutoff_are_unknown(stream):
    recs, C, H = stream
    late = {**recs[0], "event_id": "late", "item_id": "q-new", "concept_ids": ["c-new"], "event_time": C + 10}
    data = build_windows(recs + [late], C, H)
    assert "q-new" not in data.items and "c-new" not in data.concepts
    h = next(h for h in data.select if "late" in h.event_ids)
    i = h.event_ids.index("late")
    assert h.items[i] == UNKNOWN and h.concepts[i, 0] == UNKNOWN
    assert set(data.items.ids) == {r["item_id"] for r in recs if r["event_time"] < C}


def test_base_vocabulary_is_extended_keeping_old_indices(stream):
    recs, C, H = stream
    base_items = Vocabulary(["q-old", "q3"])
    data = build_windows(recs, C, H, base=(base_items, Vocabulary(["c-old"])))
    assert data.items.ids[:2] == ["q-old", "q3"] and data.items.encode("q-old") == 2
    assert data.concepts.ids[0] == "c-old"
    assert data.counts["new_items"] == len(data.items) - len(base_items)


def test_events_without_clock_are_refused(stream):
    recs, C, H = stream
    undated = {k: v for k, v in recs[0].items() if k != "event_time"}
    with pytest.raises(FinetuneError, match="event_time"):
        build_windows(recs + [undated], C, H)
