"""Windows and training batches read from the archive in columns equal those built from its records."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from connectors.archive import ArchiveWriter
from ktstream.data.archive_reader import archive_files, read_archive
from ktstream.data.columnar import ScanConfig, connect, learner_groups
from ktstream.data.vocab import Vocabulary
from ktstream.exceptions import LeakageError
from ktstream.finetune.finetune import segments
from ktstream.finetune.stream import ArchiveTrainingData
from ktstream.finetune.windows import assert_before, build_windows, build_windows_from_archive
from ktstream.training.trainer import _batches


def archived(folder, recs, partitions=1):
    """Several files per date, repeats in a later one; with ``partitions``, each learner's events in one
    partition (a keyed topic), so the files fall into groups that share no learner."""
    w = ArchiveWriter(folder, flush_records=150)
    for i, r in enumerate(recs + recs[:40]):
        w.add(("events", zlib.crc32(r["learner_id"].encode()) % partitions), i, r)
    w.flush()
    return folder


GROUPED = ScanConfig(sort_rows=500)  # a few partitions' files sorted at a time


def same_histories(a, b):
    assert [h.learner_id for h in a] == [h.learner_id for h in b]
    for x, y in zip(a, b):
        for name in ("items", "concepts", "responses", "times", "step_start"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=f"{name} of {x.learner_id}")
        assert list(x.event_ids) == list(y.event_ids)


@pytest.mark.parametrize("with_base, partitions", [(False, 1), (True, 1), (False, 5)])
def test_windows_from_the_archive_equal_windows_from_its_records(tmp_path, stream, with_base, partitions):
    recs, C, H = stream
    folder = archived(tmp_path / "archive", recs, partitions)
    base = (Vocabulary(["q0", "zz-unused"]), Vocabulary(["c1"])) if with_base else None
    expected = build_windows(read_archive(folder, end_ms=C + 2 * H), C, H, base)
    cfg = GROUPED if partitions > 1 else None
    if partitions > 1:
        assert len(learner_groups(connect(), archive_files(folder, end_ms=C + 2 * H), 500)) >= 3
    got = build_windows_from_archive(folder, C, H, base, cfg=cfg, max_events=120)
    assert got.counts == expected.counts and got.n_categories == expected.n_categories
    assert got.items.ids == expected.items.ids and got.concepts.ids == expected.concepts.ids
    for name in ("train", "select", "judge"):
        same_histories(getattr(expected, name), getattr(got, name))
    for name in ("select_scored", "judge_scored"):
        assert all(np.array_equal(x, y) for x, y in zip(getattr(expected, name), getattr(got, name)))


@pytest.mark.parametrize("partitions", [1, 5])
def test_streamed_training_batches_equal_the_in_memory_ones(tmp_path, stream, partitions):
    """One buffer holds the whole window: the same batches as the in-memory list, also when the scan
    sorts the archive a group of partitions at a time."""
    recs, C, H = stream
    folder = archived(tmp_path / "archive", recs, partitions)
    data = build_windows_from_archive(folder, C, H)
    expected = _batches(segments(data.train, 50), 32, np.random.default_rng(0), 400)
    source = ArchiveTrainingData(folder, C, data.items, data.concepts, segment=50, budget_events=10**9,
                                 table_events=100, cfg=GROUPED if partitions > 1 else None)
    got = list(source.batches(32, np.random.default_rng(0), 400))
    assert [len(b) for b in got] == [len(b) for b in expected]
    same_histories([h for b in expected for h in b], [h for b in got for h in b])


def test_streamed_training_holds_every_event_before_the_cutoff_and_none_after(tmp_path, stream):
    recs, C, H = stream
    folder = archived(tmp_path / "archive", recs)
    data = build_windows_from_archive(folder, C, H)
    buffers = list(ArchiveTrainingData(folder, C, data.items, data.concepts, segment=50, budget_events=300,
                                       table_events=100).buffers())
    sizes = [sum(len(h) for h in b) for b in buffers]
    longest = max(len(h) for h in data.train)
    assert len(buffers) >= 3 and max(sizes) < 300 + longest, "a buffer passes its budget by one learner at most"
    assert sum(sizes) == data.counts["train_events"] == sum(r["event_time"] < C for r in recs)
    assert max(float(h.times.max()) for b in buffers for h in b) < C / 1000
    with pytest.raises(LeakageError):  # the check each buffer passes does catch an event at C
        assert_before([buffers[0][0].slice(0, 1)], int(buffers[0][0].times[0] * 1000))


@pytest.mark.slow
def test_ednet_cycles_see_the_same_windows_through_the_columnar_path(tmp_path):
    """EdNet KT1 (the 11 learners of bench/finetune_ednet.py), archived and cut at that bench's cycle
    cutoffs: the windows read in columns, held or with the training window streamed as the Trainer reads it,
    equal those built from the records, so its fine-tuning result (deterministic on CPU) is the same through
    every path."""
    from datetime import datetime, timezone

    from connectors.datasets import iter_events
    from tests.conftest import require_dataset

    folder = tmp_path / "archive"
    w = ArchiveWriter(folder, flush_records=20_000)
    for offset, rec in enumerate(iter_events("ednet-kt1", require_dataset("ednet_kt1_11users"))):
        w.add(("ednet", 0), offset, rec)
        if w.due():
            w.flush()
    w.flush()
    records = read_archive(folder)
    day, H = 86_400_000, 14 * 86_400_000
    c0 = int(datetime(2019, 2, 1, tzinfo=timezone.utc).timestamp() * 1000)
    for cutoff in (c0, c0 + 5 * 28 * day, c0 + 9 * 28 * day):
        window = [r for r in records if r["event_time"] < cutoff + 2 * H]
        expected, got = build_windows(window, cutoff, H), build_windows_from_archive(folder, cutoff, H)
        assert got.counts == expected.counts and got.items.ids == expected.items.ids
        assert got.concepts.ids == expected.concepts.ids
        for name in ("train", "select", "judge"):
            same_histories(getattr(expected, name), getattr(got, name))
        streamed = build_windows_from_archive(folder, cutoff, H, train_buffer_events=2_000_000)  # the Trainer's
        assert streamed.counts == expected.counts
        same_histories(expected.train, list(streamed.train))
        for name in ("select", "judge"):  # the learners with events to score
            held = [h for h, s in zip(getattr(expected, name), getattr(expected, f"{name}_scored")) if s.any()]
            same_histories(held, getattr(streamed, name))
