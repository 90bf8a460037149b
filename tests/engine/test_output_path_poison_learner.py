"""Fault: a poison learner. One learner's events name 64 concepts of 250 characters each (valid input);
its raw window, and so its changelog record, would grow past the producer's 1 MiB limit, and before the
window had a byte bound the batch failed to send forever while its predictions were published again on
every retry. With the engine's defaults the window stays within ``engine.rebuild_window_bytes``, so the
learner is served like any other; and a batch that can never be flushed is retried a bounded number of
times, each retry after a rollback, then the engine stops, and a restart serves everything once.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from ktstream.core import window_nbytes
from ktstream.engine.exceptions import EngineError, SinkError
from ktstream.models.checkpoint import ServingModel
from tests.engine.test_output_path_oversized_outputs import (CL, PARTS, Broker, assert_each_offset_once,
                                                              assert_states_equal, drain, setup, start,
                                                              uninterrupted, with_learner)


def test_poison_learner_with_long_ids_is_served_within_the_byte_limits(monkeypatch):
    model, items, concepts, records, reference = setup(n_learners=12)
    serving = ServingModel(model, items, concepts, "v0")
    records = with_learner(records, "poison", n_events=90, n_concepts=64, id_chars=250)
    broker = Broker(records)
    engine = start(serving, broker, monkeypatch)  # the defaults: 256 KiB windows, 1 MiB records
    drain(engine, broker)

    outcome = assert_each_offset_once(broker)
    assert set(outcome.values()) == {"prediction"}, "no dead letter: the window's byte bound keeps it sendable"
    changelog = [r.value for p in range(PARTS) for r, _ in broker.topics.get((CL, p), [])]
    assert max(map(len, changelog)) < 1 << 20
    st = engine.cache.get("poison")
    assert st.window_bytes == window_nbytes(st.window) <= 256 * 1024 and 0 < len(st.window) < 90
    assert st.nbytes > st.window_bytes, "the cache counts the window's real bytes"

    preds, expected = uninterrupted(serving, records, None)
    assert_states_equal(engine, expected)
    assert st.window == expected["poison"].window
    for p in broker.values("pred"):
        key = (p["source"]["partition"], p["source"]["offset"])
        assert torch.allclose(torch.tensor(p["probs"]), torch.tensor(preds[key]), atol=1e-6), key


def test_a_batch_that_never_flushes_is_retried_a_bounded_number_of_times_then_a_restart_serves(monkeypatch):
    model, items, concepts, records, _ = setup(n_learners=6)
    serving = ServingModel(model, items, concepts, "v0")
    broker = Broker(records)
    broker.fail_flush_at = set(range(2, 100))  # the second batch, and everything after it, never flushes
    engine = start(serving, broker, monkeypatch, max_batch_retries=3)
    failures = 0
    with pytest.raises(EngineError) as stopped:
        for _ in range(20):
            try:
                engine.step()
            except SinkError:
                failures += 1
                assert broker.seeks == failures, "each failed batch is rolled back before it is processed again"
    assert stopped.type is not SinkError and "max_batch_retries" in str(stopped.value)
    assert failures == 3 and broker.seeks == 4
    assert engine.metrics.registry.get_sample_value("ktstream_batch_retries_total") == 3
    sends = Counter((tuple(json.loads(r.value)["source"].values()), rollbacks)
                    for p in range(PARTS) for r, rollbacks in broker.topics.get(("pred", p), []))
    assert sends and set(sends.values()) == {1}, "between two sends of an output there is a rollback"

    broker.fail_flush_at = set()  # the broker is back: a restart over the same committed offsets serves all
    restarted = start(serving, broker, monkeypatch)
    drain(restarted, broker)
    outcome = assert_each_offset_once(broker)
    assert set(outcome.values()) == {"prediction"}
    _, expected = uninterrupted(serving, records, None)
    assert_states_equal(restarted, expected)
