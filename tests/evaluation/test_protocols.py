"""Protocols keep test data out of every choice and score each interaction once."""

import numpy as np
import pytest

from ktstream.evaluation.protocols import benchmark, prequential_time
from ktstream.exceptions import LeakageError
from ktstream.leakage.random_labels import coin_flip_labels
from ktstream.training.trainer import TrainConfig

CFG = TrainConfig(epochs=2, batch_tokens=240, lr=1e-2, progress=False)  # 8 learners of 30
TINY = {"dim": 8, "hidden": 8}


def stream(n_learners, seed, prefix="u", length=30, start_ms=1_700_000_000_000):
    """Learners answer item q correctly iff q is even: a signal any model can learn."""
    rng = np.random.default_rng(seed)
    out = []
    for u in range(n_learners):
        t = start_ms + int(rng.integers(0, 10**7))
        for i in range(length):
            q = int(rng.integers(0, 12))
            t += int(rng.integers(1, 10**6))
            out.append({"event_id": f"{prefix}{u}-{i}", "learner_id": f"{prefix}{u}", "item_id": f"q{q}",
                        "concept_ids": [f"c{q % 3}"], "response": int(q % 2 == 0), "event_time": t, "seq": i})
    return out


def test_benchmark_scores_test_once_per_interaction():
    train, valid, test = stream(40, 0, "a"), stream(10, 1, "b"), stream(10, 2, "c")
    result = benchmark("dkt", train, valid, test, CFG, TINY)
    assert result["test"]["n"] == len(test)
    assert result["test"]["auc"] > 0.9
    assert result["counts"]["items"] == 12


def test_benchmark_refuses_learners_shared_by_train_and_test():
    train = stream(10, 0, "a")
    with pytest.raises(LeakageError):
        benchmark("dkt", train, stream(5, 1, "b"), stream(3, 0, "a"), CFG, TINY)


def test_random_labels_give_chance_auc():
    train, valid, test = (coin_flip_labels(stream(n, s, p), s) for n, s, p in ((60, 0, "a"), (15, 1, "b"), (40, 2, "c")))
    result = benchmark("dkt", train, valid, test, CFG, TINY)
    assert abs(result["test"]["auc"] - 0.5) < 0.05


def test_coin_flips_are_drawn_once_per_interaction_not_per_repeated_row():
    """A multi-concept interaction expanded into rows keeps one (random) response across its rows."""
    base = {"learner_id": "u", "event_time": None}
    recs = []
    for i in range(300):  # every interaction on item q{i} repeated for concepts a and b
        r = i % 2
        recs += [dict(base, event_id=f"e{i}a", item_id=f"q{i}", concept_ids=["a"], response=r, seq=2 * i),
                 dict(base, event_id=f"e{i}b", item_id=f"q{i}", concept_ids=["b"], response=r, seq=2 * i + 1)]
    flipped = coin_flip_labels(recs, seed=0)
    pairs = [(flipped[2 * i]["response"], flipped[2 * i + 1]["response"]) for i in range(300)]
    assert all(a == b for a, b in pairs), "the rows of one interaction share their flip"
    firsts = np.array([a for a, _ in pairs])
    assert 0.4 < firsts.mean() < 0.6 and not np.array_equal(firsts, np.arange(300) % 2)


def test_prequential_time_scores_only_after_cutoff_and_builds_vocab_before_it():
    records = stream(30, 3)
    times = np.array([r["event_time"] for r in records])
    c1, c0 = int(np.quantile(times, 0.5)), int(np.quantile(times, 0.75))
    late_item = {**records[-1], "event_id": "late", "item_id": "brand-new", "event_time": int(times.max()) + 1,
                 "seq": 99}
    cfg = TrainConfig(epochs=5, batch_tokens=240, lr=1e-2, progress=False)  # only ~half the stream is for training
    result = prequential_time("dkt", records + [late_item], c1, c0, cfg, TINY)
    assert result["counts"]["test_interactions"] == int((times >= c0).sum()) + 1
    assert result["counts"]["items"] == len({r["item_id"] for r in records if r["event_time"] < c1})
    assert result["test"]["auc"] > 0.85
