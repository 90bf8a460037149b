"""The prequential protocol on a Parquet event log, in columns, equals the record path on the same log."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ktstream.cli.main import main
from ktstream.data.eventlog import read_events, write_events
from ktstream.data.histories import before, count_before
from ktstream.evaluation.parquet_log import ParquetLog, recode
from ktstream.evaluation.protocols import prequential_histories, prequential_time
from ktstream.leakage.random_labels import coin_flip_histories, coin_flip_labels, coin_flips_per_pass
from ktstream.training.trainer import TrainConfig

T0 = 1_600_000_000_000


def log_records(seed: int = 3) -> list[dict]:
    """Learners interleaved in log order, out of time order within a learner, ties on time (one broken by
    seq, one left to log order), multi-concept items, items first seen late, learners wholly before or
    after the cut-offs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(1600):
        learner = f"u{int(rng.integers(0, 40)):02d}"
        t = T0 + int(rng.integers(0, 1000)) * 60_000
        item = int(rng.integers(0, 30 + i // 40))
        rec = {"event_id": f"e{i}", "learner_id": learner, "item_id": f"q{item}", "event_time": t,
               "response": int(rng.random() < 0.3 + 0.02 * (item % 20)), "concept_ids": [f"c{item % 7}"]}
        if item % 5 == 0:
            rec["concept_ids"].append(f"c{(item + 3) % 7}")
        if i % 9 == 0:
            rec["seq"] = int(rng.integers(0, 3))
        out.append(rec)
    out.append({"event_id": "early", "learner_id": "zz-early", "item_id": "q1", "event_time": T0 - 1, "response": 1})
    out.append({"event_id": "late", "learner_id": "zz-late", "item_id": "q999", "event_time": T0 + 10**9,
                "response": 0})
    tie = out[5]
    out.append({**tie, "event_id": "tie", "item_id": "q2"})  # same learner and time, no seq: log order breaks it
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    records = log_records()
    write_events(records, root / "log.jsonl")
    write_events(records, root / "log.parquet")
    (root / "split").mkdir()  # the same stream as a run folder's three files
    write_events(records[:700], root / "split" / "train.parquet")
    write_events(records[700:1200], root / "split" / "valid.parquet")
    write_events(records[1200:], root / "split" / "test.parquet")
    return root, read_events(root / "log.jsonl")


def untimed(fit: dict) -> dict:
    """A fit result without its wall-clock figures."""
    return {k: [untimed(e) for e in v] if k == "history" else v for k, v in fit.items() if k != "seconds"}


def cuts(records):
    times = np.array([r["event_time"] for r in records])
    return [int(np.quantile(times, q)) for q in (0.6, 0.8)]


@pytest.mark.parametrize("files", ["one", "three"])
def test_vocabularies_and_histories_equal_the_records(logs, files):
    root, records = logs
    log = ParquetLog([root / "log.parquet"] if files == "one" else
                     [root / "split" / f"{n}.parquet" for n in ("train", "valid", "test")])
    c1, c0 = cuts(records)
    assert log.time_quantiles([0.6, 0.8]) == [c1, c0]
    from ktstream.data.histories import build_vocabularies, encode

    for cut in (None, c1):
        items, concepts = build_vocabularies(r for r in records if cut is None or r["event_time"] < cut)
        got = log.vocabularies(cut)
        assert (got[0].ids, got[1].ids) == (items.ids, concepts.ids)
    train_vocab = build_vocabularies(r for r in records if r["event_time"] < c1)
    expected = encode(records, *train_vocab)
    every = log.vocabularies()
    got = recode(log.histories(*every), every, train_vocab)
    assert [h.learner_id for h in got] == [h.learner_id for h in expected]
    for a, b in zip(expected, got):
        for name in ("items", "concepts", "responses", "times", "step_start"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{name} of {a.learner_id}")
        assert list(a.event_ids) == list(b.event_ids)
    assert [h.learner_id for h in before(got, c1)] == [h.learner_id for h in encode(
        [r for r in records if r["event_time"] < c1], *train_vocab)]


def test_protocol_on_histories_equals_the_record_protocol(logs):
    root, records = logs
    c1, c0 = cuts(records)
    cfg = TrainConfig(epochs=2, patience=1, seed=0, device="cpu")
    expected = prequential_time("dkt", records, c1, c0, cfg, {"hidden": 16})
    log = ParquetLog([root / "log.parquet"])
    every, train_vocab = log.vocabularies(), log.vocabularies(c1)
    got = prequential_histories("dkt", recode(log.histories(*every), every, train_vocab), *train_vocab, c1, c0,
                                cfg, {"hidden": 16})
    assert got["counts"] == expected["counts"] and got["counts"]["test_interactions"] > 200
    assert untimed(got["fit"]) == untimed(expected["fit"])
    assert json.dumps(got["test"], sort_keys=True) == json.dumps(expected["test"], sort_keys=True)  # NaN: equal


def test_coin_flips_on_histories_equal_those_on_records(logs):
    root, records = logs
    from ktstream.data.histories import build_vocabularies, encode

    flipped = {r["event_id"]: r["response"] for r in coin_flip_labels(records, 7)}
    got = coin_flip_histories(encode(records, *build_vocabularies(records)), 7)
    assert {e: int(r) for h in got for e, r in zip(h.event_ids, h.responses)} == flipped


@pytest.mark.parametrize("random_labels", [False, True])
def test_evaluate_prequential_on_parquet_equals_jsonl(logs, tmp_path, monkeypatch, random_labels):
    """The CLI: a .parquet log goes the columnar way (no record per event is read), a .jsonl log the record
    way; same results.json figures and the same split files."""
    root, _ = logs
    common = ["--model", "dkt", "--model-arg", "hidden=16", "--epochs", "2", "--patience", "1", "--device", "cpu"]
    common += ["--random-labels"] if random_labels else []
    assert main(["evaluate", "prequential", "--events", str(root / "log.jsonl"), "-o", str(tmp_path / "rec"),
                 *common]) == 0
    import ktstream.data.eventlog as eventlog

    def no_records(*a, **k):
        raise AssertionError("the Parquet log was read a record at a time")

    monkeypatch.setattr(eventlog, "iter_parquet", no_records)
    assert main(["evaluate", "prequential", "--events", str(root / "log.parquet"), "-o", str(tmp_path / "col"),
                 "--memory-limit", "256MB", *common]) == 0
    monkeypatch.undo()
    rec, col = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("rec", "col"))
    for key in ("counts", "repeated_answers", "protocol"):
        assert col[key] == rec[key], key
    assert untimed(col["fit"]) == untimed(rec["fit"])
    assert json.dumps(col["test"], sort_keys=True) == json.dumps(rec["test"], sort_keys=True)
    for name in ("train", "valid", "test"):
        assert read_events(tmp_path / "col" / f"{name}.parquet") == read_events(tmp_path / "rec" / f"{name}.parquet")


def test_a_log_with_undated_events_is_refused_with_the_count(tmp_path, capsys):
    write_events([{"event_id": "a", "learner_id": "u", "item_id": "q", "event_time": T0, "response": 1},
                  {"event_id": "b", "learner_id": "u", "item_id": "q", "response": 0}], tmp_path / "log.parquet")
    assert main(["evaluate", "prequential", "--events", str(tmp_path / "log.parquet")]) == 2
    assert "1 of 2 events have no event_time" in capsys.readouterr().err


@pytest.mark.parametrize("flip_seed", [None, 7])
def test_the_streamed_training_window_is_the_held_one_in_buffers(logs, flip_seed):
    """`LogTrainingData` reads the log again on each pass and hands on buffers of at most the budget plus one
    learner, each learner's events before C1, coin flips included: every pass equals the held histories."""
    from ktstream.evaluation.parquet_log import LogHistories, LogTrainingData

    root, records = logs
    c1, _ = cuts(records)
    log = ParquetLog([root / "log.parquet"])
    every, train_vocab = log.vocabularies(), log.vocabularies(c1)
    held = log.histories(*every)
    if flip_seed is not None:
        held = coin_flip_histories(held, flip_seed)
    expected = before(recode(held, every, train_vocab), c1)
    flips = coin_flips_per_pass(flip_seed) if flip_seed is not None else None
    train = LogTrainingData(LogHistories(log, every, train_vocab, flips), c1, budget_events=60)
    longest = max(len(h) for h in expected)
    for _ in range(2):
        buffers = list(train.buffers())
        assert len(buffers) > 3 and all(sum(map(len, b)) < 60 + longest for b in buffers)
        got = [h for b in buffers for h in b]
        assert [h.learner_id for h in got] == [h.learner_id for h in expected]
        for a, b in zip(expected, got):
            for name in ("items", "concepts", "responses", "times", "step_start"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
            assert list(a.event_ids) == list(b.event_ids)


def test_the_streamed_protocol_holds_only_the_learners_it_scores(logs, tmp_path):
    """`evaluate prequential` on a Parquet log keeps the whole histories of the learners with events at or
    after C1 only (what selection and test score): a learner wholly before C1 is trained on, never held.
    With buffers smaller than the training window the counts, the repeated-answer figures and the split
    files still equal the record path's (the batches, hence the weights, differ)."""
    from ktstream.evaluation.parquet_log import LogHistories, LogTrainingData
    from ktstream.evaluation.protocols import prequential_split

    root, records = logs
    c1, c0 = cuts(records)
    log = ParquetLog([root / "log.parquet"])
    every, train_vocab = log.vocabularies(), log.vocabularies(c1)
    later = [h for h in LogHistories(log, every, train_vocab) if count_before(h, c1) < len(h)]
    train = LogTrainingData(LogHistories(log, every, train_vocab), c1, budget_events=60)
    cfg = TrainConfig(epochs=2, patience=1, seed=0, device="cpu")
    artifacts: dict = {}
    got = prequential_split("dkt", train, later, log.learners(), *train_vocab, c1, c0, cfg, {"hidden": 16},
                            artifacts=artifacts)
    expected = prequential_time("dkt", records, c1, c0, cfg, {"hidden": 16})
    assert got["counts"] == expected["counts"]
    late = {r["learner_id"] for r in records if r["event_time"] >= c1}
    assert {h.learner_id for h in artifacts["histories"]} == late and "zz-early" not in late
    assert got["counts"]["learners"] > len(late)
    assert abs(got["test"]["auc"] - expected["test"]["auc"]) < 0.1  # another batching of the same data

    common = ["--model", "dkt", "--model-arg", "hidden=16", "--epochs", "1", "--device", "cpu", "--random-labels"]
    assert main(["evaluate", "prequential", "--events", str(root / "log.jsonl"), "-o", str(tmp_path / "rec"),
                 *common]) == 0
    assert main(["evaluate", "prequential", "--events", str(root / "log.parquet"), "-o", str(tmp_path / "col"),
                 "--train-buffer-events", "50", *common]) == 0
    rec, col = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("rec", "col"))
    assert col["counts"] == rec["counts"] and col["repeated_answers"] == rec["repeated_answers"]
    for name in ("train", "valid", "test"):
        assert read_events(tmp_path / "col" / f"{name}.parquet") == read_events(tmp_path / "rec" / f"{name}.parquet")
    assert sorted(p.name for p in (tmp_path / "col").iterdir()) == sorted(p.name for p in (tmp_path / "rec").iterdir())


def test_a_training_buffer_must_hold_something(logs, capsys):
    root, _ = logs
    assert main(["evaluate", "prequential", "--events", str(root / "log.parquet"), "--model", "dkt",
                 "--train-buffer-events", "0"]) == 2
    assert "--train-buffer-events must be positive" in capsys.readouterr().err
