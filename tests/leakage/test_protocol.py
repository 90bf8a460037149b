"""Evaluation-protocol checks, the short-history check, the random-label bound and the report, each
shown to fail on the mistake it names and to pass on the same data done right."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ktstream.data.histories import LearnerHistory, build_vocabularies, encode
from ktstream.data.simulate import simulate
from ktstream.leakage import GateConfig, GateData, null_bound, run_gate
from ktstream.leakage.protocol import split_disjoint, vocab_from_train, windowed_after_split
from ktstream.leakage.selection import one_prediction_per_interaction, selection_on_valid
from ktstream.leakage.short_history import short_history_check
from ktstream.models import create
from ktstream.models.base import KTModel
from ktstream.scoring.binary import auc
from ktstream.training.trainer import TrainConfig, fit

CFG = GateConfig()


@pytest.fixture(scope="module")
def splits():
    """Simulated learners split by learner: records and encoded histories (vocabularies from train)."""
    recs = simulate(n_learners=120, n_items=2000, n_concepts=6, mean_length=40, seed=3)  # items unseen in train
    by = {"train": [], "valid": [], "test": []}
    for r in recs:
        k = int(r["learner_id"][1:])
        by["train" if k < 70 else "valid" if k < 90 else "test"].append(r)
    items, concepts = build_vocabularies(by["train"])
    enc = {k: encode(v, items, concepts) for k, v in by.items()}
    return by, GateData(enc["train"], enc["valid"], enc["test"], n_items=len(items), n_concepts=len(concepts))


def test_clean_learner_split_passes_every_protocol_check(splits):
    _, data = splits
    for check in (split_disjoint, windowed_after_split, vocab_from_train, one_prediction_per_interaction):
        assert check(data, CFG).status == "pass", check(data, CFG)


def test_a_learner_in_train_and_test_fails_split_disjoint(splits):
    _, data = splits
    leaky = replace(data, test=data.test + data.train[:2])
    r = split_disjoint(leaky, CFG)
    assert r.status == "fail" and r.figure >= 2 and "train and test" in r.detail


def test_windows_cut_before_the_split_are_caught(splits):
    _, data = splits
    h = data.train[0]
    half = len(h) // 2
    leaky = replace(data, train=data.train[1:] + [h.slice(0, half)], test=data.test + [h.slice(half, len(h))])
    assert split_disjoint(leaky, CFG).status == "fail"  # one learner's past in train, its future in test
    windowed = replace(data, train=data.train[1:] + [h.slice(0, half), h.slice(half, len(h))])
    assert windowed_after_split(windowed, CFG).status == "fail"


def test_overlapping_windows_score_interactions_twice(splits):
    _, data = splits
    h = data.test[0]
    leaky = replace(data, test=data.test[1:] + [h.slice(0, 30), h.slice(20, len(h))])
    r = one_prediction_per_interaction(leaky, CFG)
    assert r.status == "fail" and r.extras["duplicate_event_ids"] == 10


def test_vocabulary_built_on_all_data_fails(splits):
    by, data = splits
    items, concepts = build_vocabularies(by["train"] + by["valid"] + by["test"])
    enc = [encode(by[k], items, concepts) for k in ("train", "valid", "test")]
    everything = GateData(*enc, n_items=len(items), n_concepts=len(concepts))
    r = vocab_from_train(everything, CFG)
    assert r.status == "fail" and "never occur in train" in r.detail


def test_time_split_must_be_time_ordered(splits):
    _, data = splits
    times = np.concatenate([h.times for h in data.train])
    cut = float(np.median(times))
    before = [h.slice(0, int(np.searchsorted(h.times, cut))) for h in data.train]
    after = [h.slice(int(np.searchsorted(h.times, cut)), len(h)) for h in data.train]
    ordered = GateData([h for h in before if len(h)], [h for h in after if len(h)], split="time")
    assert split_disjoint(ordered, CFG).status == "pass"
    shuffled = GateData([h for h in after if len(h)], [h for h in before if len(h)], split="time")
    r = split_disjoint(shuffled, CFG)
    assert r.status == "fail" and "after valid begins" in r.detail


def test_selection_on_the_test_split_is_named(splits):
    _, data = splits
    cfg = TrainConfig(epochs=2, lr=1e-2, progress=False, device="cpu")
    torch.manual_seed(0)
    honest = create("dkt", n_items=data.n_items, n_concepts=data.n_concepts, dim=8, hidden=12)
    ok = selection_on_valid(honest, replace(data, fit_result=fit(honest, data.train, data.valid, cfg)))
    assert ok.status == "pass", ok
    torch.manual_seed(0)
    cheat = create("dkt", n_items=data.n_items, n_concepts=data.n_concepts, dim=8, hidden=12)
    r = selection_on_valid(cheat, replace(data, fit_result=fit(cheat, data.train, data.test, cfg)))
    assert r.status == "fail" and "selected on the test split" in r.detail


class ShortPeek(KTModel):
    """Reads r_t on a learner's first 10 positions only (an anomaly the short-history check must see)."""

    name = "short-peek"
    carries_state = False

    def __init__(self, n_items, n_concepts, n_categories=2):
        super().__init__(n_items, n_concepts, n_categories)
        self.bias = torch.nn.Parameter(torch.zeros(n_items))

    def forward(self, h, state=None):
        honest = self.bias[h.items] + 0.3 * torch.randn(h.shape, generator=torch.Generator().manual_seed(0))
        peek = 3.0 * (2.0 * h.responses.clamp(min=0) - 1.0)
        logit = torch.where(torch.arange(h.shape[1]) < 10, peek, honest)
        return F.logsigmoid(torch.stack([-logit, logit], -1)), None


def test_short_history_anomaly():
    recs = simulate(n_learners=60, n_items=40, n_concepts=6, mean_length=90, seed=5)
    part = lambda r: 0 if int(r["learner_id"][1:]) < 30 else 1 if int(r["learner_id"][1:]) < 40 else 2  # noqa: E731
    items, concepts = build_vocabularies([r for r in recs if part(r) == 0])
    train, valid, test = (encode([r for r in recs if part(r) == k], items, concepts) for k in range(3))
    data = GateData(train, valid, test, n_items=len(items), n_concepts=len(concepts))
    peek = short_history_check(ShortPeek(data.n_items, data.n_concepts), data, replace(CFG, min_scored=100))
    assert peek.status == "fail" and peek.extras["auc_short"] > 0.95, peek
    torch.manual_seed(0)
    honest = create("dkt", n_items=data.n_items, n_concepts=data.n_concepts, dim=8, hidden=12)
    fit(honest, data.train, data.valid, TrainConfig(epochs=2, lr=1e-2, progress=False, device="cpu"))
    ok = short_history_check(honest, data, replace(CFG, min_scored=100))
    assert ok.status == "pass", ok


def test_random_label_bound_matches_the_spread_of_null_aucs():
    rng = np.random.default_rng(0)
    n = 600
    aucs = []
    for _ in range(400):
        y = rng.integers(0, 2, n)
        aucs.append(auc(y, rng.random(n)))
    n1 = n // 2
    se = null_bound(n1, n - n1, z=1.0, floor=0.0)
    assert abs(np.std(aucs) / se - 1.0) < 0.12, (np.std(aucs), se)
    assert null_bound(n1, n - n1, z=3.29, floor=0.02) == pytest.approx(3.29 * se)
    assert null_bound(50_000, 50_000, z=3.29, floor=0.02) == 0.02  # large test sets: the floor


def test_report_json_is_strict_and_the_table_names_every_check(splits):
    _, data = splits
    torch.manual_seed(0)
    model = create("dkt", n_items=data.n_items, n_concepts=data.n_concepts, dim=8, hidden=12)
    report = run_gate(model, data, GateConfig(checks=("future_perturbation", "attention_masking", "short_history",
                                                       "repeated_rows"), n_learners=3))
    parsed = json.loads(report.to_json())
    assert [c["name"] for c in parsed["checks"]] == [c.name for c in report.checks]
    assert parsed["passed"] == report.passed and parsed["labels"]["data"].startswith("question-level")
    table = report.table()
    for c in report.checks:
        assert c.name in table
    assert "N/A" in table and "model has no attention" in table


def test_a_check_that_raises_fails_closed(splits):
    _, data = splits

    class Broken(ShortPeek):
        def init_state(self, batch_size):
            raise RuntimeError("no serving path")

    report = run_gate(Broken(data.n_items, data.n_concepts), data, GateConfig(checks=("serving_equivalence",)))
    assert report["serving_equivalence"].status == "fail" and "no serving path" in report["serving_equivalence"].detail


class Streamed:
    """A training split read only by passes, as a cycle's window streamed from the archive is: no length,
    no indexing, so a check that tried to hold or index it would raise."""

    def __init__(self, histories):
        self._histories, self.passes = histories, 0

    def __iter__(self):
        self.passes += 1
        return iter(list(self._histories))

    def __bool__(self):
        return bool(self._histories)


def _variants(by, data):
    h = data.train[0]
    half = len(h) // 2
    items, concepts = build_vocabularies(by["train"] + by["valid"] + by["test"])
    cut = float(np.median(np.concatenate([x.times for x in data.train])))
    before = [x.slice(0, int(np.searchsorted(x.times, cut))) for x in data.train]
    after = [x.slice(int(np.searchsorted(x.times, cut)), len(x)) for x in data.train]
    return {
        "clean": data,
        "learner in train and test": replace(data, test=data.test + data.train[:2]),
        "windows cut before the split": replace(data, train=data.train[1:] + [h.slice(0, half), h.slice(half, len(h))],
                                                test=data.test + [h.slice(half, len(h))]),
        "vocabulary from all data": GateData(*[encode(by[k], items, concepts) for k in ("train", "valid", "test")],
                                             n_items=len(items), n_concepts=len(concepts)),
        "time split reversed": GateData([x for x in after if len(x)], [x for x in before if len(x)], split="time"),
    }


@pytest.mark.parametrize("variant", ["clean", "learner in train and test", "windows cut before the split",
                                     "vocabulary from all data", "time split reversed"])
def test_a_streamed_training_split_gets_the_verdicts_of_the_list(splits, variant):
    """The data checks read a training split streamed from an archive pass by pass: each verdict, figure and
    detail equals the one on the same histories as a list, the leaky variants included; each check reads
    the split once, repeated_rows twice (the co-tagged pairs, then the counts)."""
    from ktstream.leakage.expansion import repeated_rows_check

    data = _variants(*splits)[variant]
    stream = Streamed(data.train)
    streamed = replace(data, train=stream)
    passes = {}
    for check in (split_disjoint, windowed_after_split, vocab_from_train, repeated_rows_check):
        want, before = check(data, CFG), stream.passes
        got = check(streamed, CFG)
        passes[check.__name__] = stream.passes - before
        assert (got.status, got.figure, got.detail) == (want.status, want.figure, want.detail), check.__name__
    assert passes == {"split_disjoint": 1, "windowed_after_split": 1, "vocab_from_train": 1,
                      "repeated_rows_check": 2}
    if variant != "clean":
        assert any(check(streamed, CFG).status == "fail" for check in (split_disjoint, windowed_after_split,
                                                                     vocab_from_train)), "the variant's leak"


class Generated:
    """A training split made afresh on each pass (nothing held between passes): ``n`` learners of 100 events."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for k in range(self.n):
            ids = [f"learner-{k}-event-{i:06d}" for i in range(100)]
            yield LearnerHistory(f"learner-{k}", np.full(100, 2), np.full((100, 1), 2), np.ones(100, int),
                                 np.arange(100.0) + k, np.arange(100), ids)

    def __bool__(self):
        return True


def test_split_disjoint_does_not_hold_a_streamed_training_split():
    """200,000 training event ids (a set of them: about 20 MB) are checked against the later splits one pass
    at a time: the check's peak allocation stays within a few MB."""
    import tracemalloc

    train = Generated(2000)
    later = [next(iter(Generated(1)))]
    data = GateData(train, later[:0], later, split="learner")
    tracemalloc.start()
    try:
        result = split_disjoint(data, CFG)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.status == "fail" and result.figure == 101  # learner-0: its 100 events and its id
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MB: the training split's ids were held"
