"""Factories for engine tests: simulated streams, Kafka-like records, tiny models, offline references."""

from __future__ import annotations

import json
import zlib

import pytest
import torch

from ktstream.core import Record
from ktstream.data.histories import build_vocabularies, collate, encode
from ktstream.data.simulate import simulate
from ktstream.engine import MemorySink, MemorySource, StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.engine.replay import replay_order
from ktstream.models import create, family
from ktstream.models.stepwise import predict_stepwise
from ktstream.serving.runner import ModelRunner

EVENTS, PREDICTIONS, DEAD = "t.events", "t.predictions", "t.dead"


def stream(n_learners=30, mean_length=15, seed=0, step_prob=0.3, query_prob=0.1):
    """Simulated events in publishing order, many learners active at once."""
    return replay_order(simulate(n_learners=n_learners, mean_length=mean_length, seed=seed, step_prob=step_prob,
                                 query_prob=query_prob, start_spread_ms=60_000, n_items=40, n_concepts=8))


def partition_of(learner_id: str, partitions: int) -> int:
    return zlib.crc32(learner_id.encode()) % partitions


def as_records(records, partitions=3, topic=EVENTS, raw=None):
    """Kafka-like records keyed by learner; ``raw`` maps index -> bytes to publish instead."""
    offsets = [0] * partitions
    out = []
    for i, r in enumerate(records):
        p = partition_of(r["learner_id"], partitions)
        value = raw[i] if raw and i in raw else json.dumps(r).encode()
        out.append(Record(topic, p, offsets[p], r["learner_id"].encode(), value, 0))
        offsets[p] += 1
    return out


def tiny_model(name, items, concepts, seed=0):
    torch.manual_seed(seed)
    return create(name, n_items=len(items), n_concepts=len(concepts), n_categories=2,
                  **family(name).tiny_config).eval()


def offline(model, records, items, concepts):
    """event_id -> probs (K,) from the serving path over the collated histories (the reference)."""
    hs = encode(records, items, concepts)
    probs, _ = predict_stepwise(model, collate(hs))
    return {eid: probs[b, t] for b, h in enumerate(hs) for t, eid in enumerate(h.event_ids)}


def memory_engine(model, items, concepts, records, max_batch=50, late_policy="dead-letter", cache_bytes=1 << 30,
                  version="v0"):
    source, sink = MemorySource(records), MemorySink()
    proc = Processor(ModelRunner(model, items, concepts, version), StateCache(cache_bytes), PREDICTIONS, DEAD,
                     late_policy, max_record_bytes=4096)
    return Engine(source, sink, proc, max_batch=max_batch), source, sink


def drain(engine, source):
    while source.pending:
        engine.step()


def outputs(sink, topic):
    return [json.loads(o.value) for o in sink.flushed if o.topic == topic]


@pytest.fixture(scope="session")
def kit():
    """The helpers above, as one fixture (test modules do not import conftest)."""

    class Kit:
        pass

    k = Kit()
    for f in (stream, as_records, tiny_model, offline, memory_engine, drain, outputs, build_vocabularies,
              partition_of):
        setattr(k, f.__name__, staticmethod(f))
    k.EVENTS, k.PREDICTIONS, k.DEAD = EVENTS, PREDICTIONS, DEAD
    return k


@pytest.fixture(scope="session")
def broker():
    """A real embedded broker (Tansu) shared by the engine's broker tests."""
    from connectors.broker import EmbeddedBroker

    with EmbeddedBroker() as b:
        yield b
