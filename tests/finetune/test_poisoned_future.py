"""Invariant 5: an event at or after the cutoff C never reaches training.

The poison is chosen so that it *would* change the weights: the same trainer
run on a list that lets it through (the unsafe variant below, which calls the
trainer directly, skipping the loader) gives different weights. Under the real
loader the weights are bit-identical to a run on the clean stream, and forcing
the poison into a training batch raises LeakageError.
"""

from __future__ import annotations

import pytest
import torch

from ktstream.data.histories import encode
from ktstream.exceptions import LeakageError
from ktstream.finetune import windows as windows_module
from ktstream.finetune.finetune import fine_tune, initial_model, segments
from ktstream.finetune.windows import assert_before, build_windows
from ktstream.training.trainer import fit
from tests.finetune.conftest import TINY_DKT, tiny_finetune


def poison(records, at_ms: int, n: int = 60) -> list[dict]:
    """Events of existing learners on known items, all wrong, from ``at_ms`` on; plus a never-seen item."""
    known = sorted({r["item_id"] for r in records})
    learners = sorted({r["learner_id"] for r in records})[:5]
    out = [{"event_id": f"poison-{i}", "learner_id": learners[i % 5], "item_id": known[i % len(known)],
            "concept_ids": ["c1"], "response": 0, "event_time": at_ms + 1000 * i} for i in range(n)]
    out.append({"event_id": "poison-new", "learner_id": learners[0], "item_id": "q-future", "concept_ids": ["c-future"],
                "response": 1, "event_time": at_ms})
    return out


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def train_weights(records, C, H, cfg):
    data = build_windows(records, C, H)
    result = fine_tune(data, cfg=cfg, family="dkt", model_kwargs=TINY_DKT)
    return data, weights(result.model)


def unsafe_weights(records, data, cfg):
    """The variant that lets everything through: same vocabularies, same trainer, no cutoff."""
    model, _ = initial_model(data, None, "dkt", TINY_DKT, cfg.seed)
    everything = segments(encode(records, data.items, data.concepts), cfg.segment)
    fit(model, everything, data.select, cfg.train_config(), valid_scored=data.select_scored)
    return weights(model)


@pytest.mark.parametrize("where", ["after_judge_window", "in_selection_window"])
def test_poison_after_cutoff_leaves_weights_bit_identical(stream, where):
    recs, C, H = stream
    cfg = tiny_finetune(epochs=1 if where == "in_selection_window" else 2)  # one epoch: selection cannot differ
    at = C + 2 * H + 1 if where == "after_judge_window" else C  # exactly at C counts as the future
    bad = poison(recs, at)
    clean_data, clean = train_weights(recs, C, H, cfg)
    data, poisoned = train_weights(recs + bad, C, H, cfg)
    assert same(clean, poisoned), "an event at or after C changed the trained weights"
    assert data.items.ids == clean_data.items.ids and data.concepts.ids == clean_data.concepts.ids
    assert "q-future" not in data.items and "c-future" not in data.concepts
    # the poison would have changed them: the unsafe variant trains on it and ends elsewhere
    assert not same(clean, unsafe_weights(recs + bad, data, cfg))


def test_future_event_forced_into_training_batch_raises(stream):
    recs, C, H = stream
    data = build_windows(recs, C, H)
    forced = encode(recs + poison(recs, C), data.items, data.concepts)
    data.train = [h for h in forced if h.learner_id == data.train[0].learner_id] + data.train[1:]
    with pytest.raises(LeakageError, match="not before the cutoff"):
        fine_tune(data, cfg=tiny_finetune(), family="dkt", model_kwargs=TINY_DKT)


def test_loader_checks_where_training_histories_are_built(stream, monkeypatch):
    """If the window filter were bypassed, the check in build_windows itself raises."""
    recs, C, H = stream
    bad = poison(recs, C + 5)
    real = windows_module.encode
    monkeypatch.setattr(windows_module, "encode", lambda r, i, c: real(list(r) + bad, i, c))
    with pytest.raises(LeakageError):
        build_windows(recs, C, H)


def test_events_without_clock_cannot_be_shown_before_cutoff(stream):
    recs, C, H = stream
    data = build_windows(recs, C, H)
    h = data.train[0]
    h.times = h.times.copy()
    h.times[-1] = float("nan")
    with pytest.raises(LeakageError):
        assert_before(data.train, C)


def test_event_one_millisecond_before_cutoff_is_training_data(stream):
    recs, C, H = stream
    edge = {**recs[0], "event_id": "edge", "event_time": C - 1, "item_id": "q-edge"}
    at = {**recs[0], "event_id": "at", "event_time": C, "item_id": "q-at"}
    data = build_windows(recs + [edge, at], C, H)
    assert "q-edge" in data.items and "q-at" not in data.items
    assert any("edge" in h.event_ids for h in data.train) and not any("at" in h.event_ids for h in data.train)
