"""train / evaluate / predict: one call each, results as objects and DataFrames, the benchmark protocol's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

import ktstream
from ktstream.api.training import _train_valid
from ktstream.evaluation.protocols import benchmark
from ktstream.training.trainer import TrainConfig
from tests.api.conftest import simulated

TINY = {"dim": 8, "hidden": 8}


@pytest.fixture(scope="module")
def data() -> ktstream.Dataset:
    return ktstream.Dataset.of(simulated(n_learners=40, mean_length=20, seed=7, requests=0.05)).split_by_learner(
        test=0.25, valid=0.15, seed=0)


@pytest.fixture(scope="module")
def trained(data) -> ktstream.Trained:
    return ktstream.train("dkt", data, epochs=2, model_args=TINY, progress=False)


def test_train_and_evaluate_give_the_benchmark_protocols_numbers(data, trained):
    result = ktstream.evaluate(trained.model, trained.vocab, data.test)
    cfg = TrainConfig(epochs=2, progress=False)
    reference = benchmark("dkt", data.train, data.valid, data.test, cfg, TINY)
    assert result.auc == pytest.approx(reference["test"]["auc"], abs=1e-9)
    assert result.metrics["n"] == reference["test"]["n"] == sum("response" in r for r in data.test)
    assert trained.fit.best_epoch == reference["fit"]["best_epoch"]
    assert "Trained('dkt'" in repr(trained) and "Evaluation(n=" in repr(result)


def test_evaluation_scores_are_the_reference_implementations(data, trained):
    result = trained.evaluate(data.test)
    p = result.predictions
    scored = p.response >= 0
    assert len(p) == len(data.test) and (~scored).any()  # prediction requests are predicted, not scored
    assert result.auc == pytest.approx(roc_auc_score(p.response[scored], p.p_correct[scored]), abs=1e-12)
    assert result.log_loss == pytest.approx(log_loss(p.response[scored], p.p_correct[scored]), abs=1e-6)
    assert set(result.by_history_length) >= {"1-2", "3-10"}


def test_vocabularies_come_from_the_training_events_only(data, trained):
    train_items = {r["item_id"] for r in data.train}
    assert set(trained.vocab.items.ids) == train_items
    assert all(i in train_items for c in trained.vocab.probes.values() for i in c)


def test_without_validation_events_a_tenth_of_the_learners_is_held_out(data):
    train, valid = _train_valid(data.train, None)
    held = {r["learner_id"] for r in valid}
    assert held and held.isdisjoint(r["learner_id"] for r in train)
    assert len(train) + len(valid) == len(data.train)
    assert len(held) == round(0.1 * len({r["learner_id"] for r in data.train}))


def test_since_scores_only_later_events_with_the_earlier_ones_as_history(data, trained):
    times = sorted(r["event_time"] for r in data.test if "response" in r)
    since = times[len(times) // 2]
    later = trained.evaluate(data.test, since=since)
    assert later.metrics["n"] == sum(1 for t in times if t >= since)
    whole = trained.evaluate(data.test)
    kept = (whole.predictions.response >= 0) & np.isin(whole.predictions.event_id,
                                                       [r["event_id"] for r in data.test if r["event_time"] >= since])
    assert later.auc == pytest.approx(roc_auc_score(whole.predictions.response[kept],
                                                    whole.predictions.p_correct[kept]), abs=1e-12)


def test_frames(data, trained):
    pytest.importorskip("pandas")
    preds = ktstream.predict(trained.model, trained.vocab, data.test).to_frame()
    assert list(preds.columns) == ["learner_id", "event_id", "item_id", "position", "response", "p_correct"]
    assert len(preds) == len(data.test) and preds.groupby("learner_id")["position"].min().eq(1).all()
    first = min(data.test, key=lambda r: (r["learner_id"], r["event_time"]))
    assert preds.iloc[0][["event_id", "item_id"]].tolist() == [first["event_id"], first["item_id"]]
    metrics = trained.evaluate(data.test).to_frame()
    assert len(metrics) == 1 and {"auc", "accuracy", "log_loss", "rmse", "brier"} <= set(metrics.columns)


def test_ordinal_models_are_scored_on_p_at_least_one():
    events = simulated(n_learners=20, mean_length=15, n_categories=3)
    data = ktstream.Dataset.of(events).split_by_learner(test=0.3, seed=0)
    trained = ktstream.train("deep-gpcm", data, epochs=1, model_args={"memory_size": 5, "key_dim": 8,
                                                                      "value_dim": 8, "summary_dim": 8},
                             progress=False)
    result = trained.evaluate(data.test)
    p = result.predictions
    assert p.probs.shape[1] == 3 and np.allclose(p.probs.sum(1), 1.0, atol=1e-5)
    assert result.auc == pytest.approx(roc_auc_score(p.response >= 1, 1.0 - p.probs[:, 0]), abs=1e-12)
    if pytest.importorskip("pandas"):
        assert {"p0", "p1", "p2"} <= set(p.to_frame().columns)


def test_arguments_are_checked(data):
    with pytest.raises(ValueError, match="unknown training option.*valid: epochs"):
        ktstream.train("dkt", data, epoch=1)
    with pytest.raises(ValueError, match="no train/valid/test splits"):
        ktstream.train("dkt", ktstream.Dataset.of(data.events), epochs=1)
    with pytest.raises(ValueError, match="unknown model 'dtk'"):
        ktstream.train("dtk", data, epochs=1)


def test_a_trained_bundle_passed_as_the_model_says_what_to_do(data, trained):
    for call in (lambda: ktstream.evaluate(trained, trained.vocab, data.test),
                 lambda: ktstream.Tracer(trained, trained.vocab), lambda: ktstream.save(trained, trained.vocab, "x")):
        with pytest.raises(TypeError, match="pass trained.model, trained.vocab"):
            call()
    with pytest.raises(TypeError, match="and its Vocab, got DKT and list"):
        ktstream.predict(trained.model, data.test, data.test)
