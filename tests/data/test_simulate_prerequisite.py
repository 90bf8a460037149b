"""The prerequisite simulator's ground truth is what it says: the dependent answer hangs on the recorded
position, d steps back, and on nothing else a model could read."""

from __future__ import annotations

import numpy as np

from ktstream.data.simulate_prerequisite import simulate_prerequisite
from ktstream.scoring.binary import auc


def _by_learner(records):
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["learner_id"], []).append(r)
    return out


def test_truth_names_the_prerequisite_d_steps_back():
    distances = (1, 3, 10, 40)
    data = simulate_prerequisite(n_learners=20, length=60, distances=distances, seed=1)
    seqs = _by_learner(data.records)
    assert data.truth
    for lid, recs in seqs.items():
        times = [r["event_time"] for r in recs]
        assert all(a < b for a, b in zip(times, times[1:])), "every event its own step"
        for i, r in enumerate(recs):
            if r["event_id"] not in data.truth:
                assert not r["item_id"].startswith("d")
                continue
            pos, d = data.truth[r["event_id"]]
            assert d in distances and pos == i - d
            prereq = recs[pos]
            assert r["item_id"] == "d" + prereq["item_id"][1:] and prereq["item_id"].startswith("p")
            assert r["concept_ids"] == prereq["concept_ids"]
    used = {d for _, d in data.truth.values()}
    assert used == set(distances)


def test_a_predictor_given_the_true_position_predicts_well_and_others_do_not():
    data = simulate_prerequisite(n_learners=150, length=80, distances=(1, 5, 20, 60), fidelity=0.9, seed=2)
    seqs = _by_learner(data.records)
    rng = np.random.default_rng(0)
    y, oracle, wrong = [], [], []
    for recs in seqs.values():
        for i, r in enumerate(recs):
            if r["event_id"] in data.truth and i >= 2:
                pos, d = data.truth[r["event_id"]]
                y.append(r["response"])
                oracle.append(0.9 if recs[pos]["response"] else 0.1)
                other = int(rng.choice([j for j in range(i) if j != pos]))
                wrong.append(0.9 if recs[other]["response"] else 0.1)
    y = np.array(y)
    assert len(y) > 1000
    assert auc(y, np.array(oracle)) > 0.85  # the response depends on the prerequisite ...
    assert abs(auc(y, np.array(wrong)) - 0.5) < 0.06  # ... and not on another earlier interaction
    agree = np.mean([(o > 0.5) == bool(t) for o, t in zip(oracle, y)])
    assert 0.87 < agree < 0.93  # fidelity 0.9
