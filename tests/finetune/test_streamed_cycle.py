"""A cycle that streams its training window from the archive: the same windows, the same fine-tuned
weights and the same gate verdicts as the cycle that holds the window, and nothing of it held."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from ktstream.exceptions import LeakageError
from ktstream.finetune.finetune import fine_tune
from ktstream.finetune.promotion import gate
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.scheduler import Trainer
from ktstream.finetune.stream import ArchiveTrainingData
from ktstream.finetune.windows import assert_before, build_windows_from_archive
from ktstream.leakage import ALL_CHECKS
from tests.finetune.conftest import DAY_MS, TINY_DKT, fast_gate, fast_promotion, tiny_finetune
from tests.finetune.test_windows_archive import GROUPED, archived, same_histories

WHOLE = 10**9  # a training buffer that holds the whole window: one buffer, the in-memory batches


def scored_only(histories, scored):
    return [h for h, s in zip(histories, scored) if s.any()]


@pytest.mark.parametrize("partitions", [1, 5])
def test_streamed_windows_hold_only_the_scored_learners(tmp_path, stream, partitions):
    recs, C, H = stream
    folder = archived(tmp_path / "archive", recs, partitions)
    cfg = GROUPED if partitions > 1 else None
    held = build_windows_from_archive(folder, C, H, cfg=cfg, max_events=120)
    got = build_windows_from_archive(folder, C, H, cfg=cfg, max_events=120, train_buffer_events=300)
    assert isinstance(got.train, ArchiveTrainingData) and got.counts == held.counts
    same_histories(sorted(got.train, key=lambda h: h.learner_id), held.train)
    for name in ("select", "judge"):
        want = scored_only(getattr(held, name), getattr(held, f"{name}_scored"))
        same_histories(want, getattr(got, name))
        assert len(want) < len(getattr(held, name)), f"some learners have nothing scored in {name}"
        assert all(s.any() for s in getattr(got, f"{name}_scored"))
    assert all(h.items.base is None for h in got.judge), "held histories own their arrays, not the scan's tables"
    assert all(h.event_ids.arrow().buffers()[1].size == 4 * (len(h) + 1) for h in got.judge), "and their ids"


def test_streamed_cycle_fine_tunes_to_the_same_weights_and_gate_verdicts(tmp_path, stream):
    """With one buffer the trainer sees the in-memory batches: bit-identical weights on CPU; every gate check,
    the coin-flip training included, gives the same verdict and figure on the streamed window."""
    recs, C, H = stream
    folder = archived(tmp_path / "archive", recs)
    held = build_windows_from_archive(folder, C, H)
    streamed = build_windows_from_archive(folder, C, H, train_buffer_events=WHOLE)
    ft = tiny_finetune(epochs=2)
    a = fine_tune(held, cfg=ft, family="dkt", model_kwargs=TINY_DKT)
    b = fine_tune(streamed, cfg=ft, family="dkt", model_kwargs=TINY_DKT)
    for (name, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(x, y), name
    assert [r["valid_auc"] for r in a.fit.history] == pytest.approx([r["valid_auc"] for r in b.fit.history],
                                                                     abs=1e-9)
    for days in (None, 2.0):
        cfg = fast_promotion(gate=fast_gate(checks=list(ALL_CHECKS)), random_labels_days=days)
        want, got = gate(a.model, held, cfg), gate(a.model, streamed, cfg)
        assert want.passed and got.labels == want.labels
        for w, g in zip(want.checks, got.checks):
            assert (g.name, g.status, g.figure, g.bound) == (w.name, w.status, w.figure, w.bound), w.name


class ReadsPastItsCutoff(ArchiveTrainingData):
    """A training source that reads up to ``cutoff_ms`` but claims the earlier ``claimed_ms``."""

    claimed_ms = 0

    def _checked(self, buffer):
        buffer.sort(key=lambda h: h.learner_id)
        assert_before(buffer, self.claimed_ms, "training")
        return buffer


def test_a_leak_in_the_streamed_window_is_caught(tmp_path, stream):
    """Training events of the selection window, streamed: the trainer refuses the first buffer that holds
    one, and the gate's split check fails on the same window."""
    recs, C, H = stream
    folder = archived(tmp_path / "archive", recs)
    data = build_windows_from_archive(folder, C, H, train_buffer_events=WHOLE)
    leaky = ReadsPastItsCutoff(folder, C + H // 2, data.items, data.concepts, segment=None, budget_events=WHOLE)
    leaky.claimed_ms = C
    with pytest.raises(LeakageError, match="not before the cutoff"):
        fine_tune(replace(data, train=leaky), cfg=tiny_finetune(epochs=1), family="dkt", model_kwargs=TINY_DKT)
    leaky.claimed_ms = C + H  # past the trainer's own check: the gate still sees train overlap selection
    candidate = fine_tune(data, cfg=tiny_finetune(epochs=1), family="dkt", model_kwargs=TINY_DKT).model
    report = gate(candidate, replace(data, train=leaky), fast_promotion(gate=fast_gate(checks=["split_disjoint"])))
    assert report.checks[0].status == "fail" and "train ends at" in report.checks[0].detail


def test_the_trainer_streams_its_training_window(tmp_path, stream, monkeypatch):
    """The service's cycle reads its training window in buffers of ``train_buffer_events``: none larger than
    that plus one learner, and the cycle completes through the gate."""
    recs, C, H = stream
    archived(tmp_path / "archive", recs)
    sizes = []
    original = ArchiveTrainingData._checked

    def watched(self, buffer):
        sizes.append(sum(len(h) for h in buffer))
        return original(self, buffer)

    monkeypatch.setattr(ArchiveTrainingData, "_checked", watched)
    t = Trainer(str(tmp_path / "archive"), ModelRegistry(tmp_path / "registry"), horizon_ms=DAY_MS, every_ms=DAY_MS,
                family="dkt", model_kwargs=TINY_DKT, ft=tiny_finetune(epochs=1),
                promotion=fast_promotion(gate=fast_gate(checks=list(ALL_CHECKS))), train_buffer_events=200)
    cycle = t.run_once()
    longest = max(np.bincount([int(r["learner_id"][1:]) for r in recs]))
    assert cycle is not None and cycle.outcome == "promoted"
    assert len(sizes) > 3 and max(sizes) < 200 + longest
    assert cycle.window["train_events"] == sum(r["event_time"] < cycle.cutoff_ms for r in recs)


@pytest.mark.parametrize("buffer", [None, WHOLE])
def test_a_selection_window_without_events_is_refused_by_name(tmp_path, stream, buffer):
    """No event in [C, C+H) (a gap in the archive): nothing to select an epoch on, so fine-tuning stops with
    a FinetuneError naming the window, held or streamed, instead of training without early stopping."""
    from ktstream.finetune.exceptions import FinetuneError

    recs, C, H = stream
    gap = [r for r in recs if not C <= r["event_time"] < C + H]
    folder = archived(tmp_path / "archive", gap)
    data = build_windows_from_archive(folder, C, H, train_buffer_events=buffer)
    with pytest.raises(FinetuneError, match=f"no events in the selection window \\[{C}, {C + H}\\)"):
        fine_tune(data, cfg=tiny_finetune(epochs=1), family="dkt", model_kwargs=TINY_DKT)


def test_the_coin_flip_window_of_a_streamed_cycle_does_not_hold_the_archive_tables(tmp_path, stream):
    """``random_labels_days`` keeps the last days of training: from a streamed window they are copies, not
    views of the tables they were read from (which would hold the whole window), and equal the held ones."""
    from ktstream.finetune.promotion import recent_training

    recs, C, H = stream
    folder = archived(tmp_path / "archive", recs)
    held = recent_training(build_windows_from_archive(folder, C, H), 2.0)
    got = recent_training(build_windows_from_archive(folder, C, H, train_buffer_events=WHOLE), 2.0)
    same_histories(held, got)
    assert 0 < sum(len(h) for h in got) < sum(r["event_time"] < C for r in recs)
    assert all(h.items.base is None and h.times.base is None for h in got)
    assert all(h.event_ids.arrow().buffers()[1].size == 4 * (len(h) + 1) for h in got)
