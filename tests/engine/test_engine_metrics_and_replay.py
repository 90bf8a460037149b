"""Metrics series, online quality, replay order and re-timing, and the no-Kafka-in-ktstream rule."""

from __future__ import annotations

import re
from pathlib import Path

from ktstream.engine.collector import BatchCollector
from ktstream.engine.metrics import SERIES
from ktstream.engine.replay import Retimer, replay_order

ROOT = Path(__file__).resolve().parents[2]


def test_every_documented_series_is_exported_and_counts(kit):
    recs = kit.stream(n_learners=15, mean_length=10, seed=3, query_prob=0.1)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                             kit.as_records(recs), max_batch=40)
    kit.drain(engine, source)
    engine.run(stop=__import__("threading").Event(), until=lambda: True)  # final gauge sample
    text = engine.metrics.exposition().decode()
    for name in SERIES:
        assert re.search(rf"^{name}(_bucket|_count|_sum)?({{.*}})? ", text, re.M), f"{name} missing"
    answered = sum(1 for r in recs if "response" in r)
    assert f"ktstream_events_consumed_total {float(len(recs))}" in text
    assert f"ktstream_predictions_produced_total {float(len(recs))}" in text
    assert f"ktstream_learners_cached {15.0}" in text
    assert f"ktstream_end_to_end_latency_seconds_count {float(len(recs))}" in text
    assert f'ktstream_model_info{{name="dkt",version="v0"}} 1.0' in text
    cal = sum(float(m) for m in re.findall(r"^ktstream_calibration_predictions_total{.*} (\S+)", text, re.M))
    assert cal == answered, "every answered binary prediction lands in one calibration bin"
    auc = float(re.search(r"^ktstream_online_roc_auc (\S+)", text, re.M).group(1))
    assert 0.0 <= auc <= 1.0 and auc == engine.metrics.quality.auc()  # sampled with the other gauges
    loss = float(re.search(r"^ktstream_online_log_loss (\S+)", text, re.M).group(1))
    assert loss == engine.metrics.quality.log_loss()


def test_loop_phases_add_up_to_no_more_than_the_loop(kit):
    """ktstream_loop_seconds_total: every phase of an at-least-once micro-batch is timed, and together
    they fit in the wall time of the loop that ran them."""
    import time

    recs = kit.stream(n_learners=15, mean_length=10, seed=5)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                             kit.as_records(recs), max_batch=40)
    engine.collector = BatchCollector(young_objects=100)
    engine.collector.start()  # as run() does
    start = time.perf_counter()
    try:
        kit.drain(engine, source)
    finally:
        engine.close()
    wall = time.perf_counter() - start
    totals = engine.metrics.loop_totals
    assert set(totals) == {"poll", "process", "send", "flush", "commit", "apply", "gc"}
    assert all(seconds > 0 for seconds in totals.values()), totals
    assert sum(totals.values()) <= wall
    assert totals["process"] > totals["apply"]  # the model ran in process, not in a mislabelled phase
    text = engine.metrics.exposition().decode()
    assert re.search(rf'^ktstream_loop_seconds_total{{phase="process"}} {totals["process"]}$', text, re.M)


def test_quality_auc_matches_sklearn_on_a_window():
    from sklearn.metrics import roc_auc_score

    from ktstream.engine.quality import OnlineQuality

    import numpy as np
    rng = np.random.default_rng(0)
    p = rng.random(300)
    y = (rng.random(300) < p).astype(int)
    q = OnlineQuality(window=100)
    for pi, yi in zip(p, y):
        q.update(float(pi), int(yi))
    assert abs(q.auc() - roc_auc_score(y[-100:], p[-100:])) < 1e-9


def test_quality_batches_equal_river_one_at_a_time():
    """update_many over uneven micro-batches == river's rolling metrics fed one outcome at a time."""
    import numpy as np
    from river import drift, metrics, utils

    from ktstream.engine.quality import OnlineQuality

    rng = np.random.default_rng(1)
    p = np.concatenate([rng.random(1500) * 0.5, 0.5 + rng.random(1500) * 0.5])  # a shift ADWIN should flag
    y = (rng.random(3000) < np.r_[p[:1500], 1 - p[1500:]]).astype(int)
    q = OnlineQuality(window=500, bins=10)
    auc, loss, adwin = metrics.RollingROCAUC(window_size=500), utils.Rolling(metrics.LogLoss, window_size=500), \
        drift.ADWIN(delta=0.002)
    alarms, counts = 0, np.zeros(10)
    for i in range(0, 3000, 173):
        counts += q.update_many(p[i : i + 173], y[i : i + 173]).n
    for pi, yi in zip(p.tolist(), y.tolist()):
        auc.update(yi == 1, pi)
        loss.update(yi == 1, pi)
        adwin.update(abs(yi - pi))
        alarms += adwin.drift_detected
    assert q.auc() == auc.get() and abs(q.log_loss() - loss.get()) < 1e-12
    assert q.drift_alarms == alarms > 0
    assert counts.tolist() == np.bincount(np.minimum((p * 10).astype(int), 9), minlength=10).tolist()


def test_replay_order_keeps_each_learner_in_event_time_order(kit):
    recs = kit.stream(n_learners=10, mean_length=8, seed=1)
    shuffled = list(reversed(recs))
    order = replay_order(shuffled)
    times = [r["event_time"] for r in order]
    assert times == sorted(times)
    assert {r["event_id"] for r in order} == {r["event_id"] for r in recs}


def test_retimer_keeps_steps_and_strict_order():
    rt = Retimer()
    out = [rt({"learner_id": "u", "event_time": t}, now_ms=1000)["event_time"] for t in (5, 5, 7, 9, 9)]
    assert out == [1000, 1000, 1001, 1002, 1002]


def test_ktstream_imports_no_kafka_client():
    pattern = re.compile(r"^\s*(import kafka|from kafka\b)", re.M)
    offenders = [str(p) for p in (ROOT / "ktstream").rglob("*.py") if pattern.search(p.read_text())]
    assert not offenders, f"kafka-python imported outside connectors/: {offenders}"
