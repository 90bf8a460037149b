"""Restore from the store's changelog checkpoint, on the real embedded broker, in both guarantees.

The engine ``ktstream serve`` builds (build_engine, Kafka clients, SQLite store)
dies right after a commit, before its store write (the window the changelog
exists for); a new engine on the same directory restores the missing states
reading only the changelog tail after the store's checkpoint (the offsets the
sink's acknowledgements gave), not the partition's whole changelog, and
continues; its stored states equal an uninterrupted run's (1e-6).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from connectors.kafka import KafkaSink, KafkaSource, sink_for
from connectors.kafka.admin import create_topics
from connectors.kafka.committed import read_partition
from tests.support.state_chaos import reference
from ktstream.cli.serve import create_changelog
from ktstream.config import load_settings
from ktstream.core import Output, Record
from ktstream.models.checkpoint import ServingModel
from ktstream.service import build_engine
from ktstream.state import SqliteStore
from tests.state.test_store_engine import setup

pytestmark = pytest.mark.broker
PARTS = 2


class Crash(BaseException):
    pass


class DiesAfterCommit(SqliteStore):
    """The SQLite store; the ``n``-th write with states never happens: the process dies first."""

    def __init__(self, directory, n):
        super().__init__(directory)
        self.n = n

    def write(self, states, offsets, changelog=None):
        if states:
            self.n -= 1
            if self.n == 0:
                raise Crash("after the commit, before the store write")
        super().write(states, offsets, changelog)


@pytest.fixture(scope="module")
def broker():
    from connectors.broker import EmbeddedBroker

    with EmbeddedBroker() as b:
        yield b


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_restore_reads_only_the_changelog_tail(broker, tmp_path, guarantee):
    model, items, concepts, _, _ = setup(n_learners=30)
    serving = ServingModel(model, items, concepts, "v0")
    tag = f"ck-{uuid.uuid4().hex[:6]}"
    s = load_settings(None, kafka={"bootstrap_servers": broker.bootstrap_servers, "group_id": tag,
                                   "session_timeout_ms": 6000, "partitions": PARTS,
                                   "topics": {"events": f"{tag}.ev", "predictions": f"{tag}.pred",
                                              "dead_letters": f"{tag}.dead"}},
                      engine={"max_batch": 10, "poll_timeout_ms": 50, "describe": False},
                      state={"dir": str(tmp_path / "state"), "processing_guarantee": guarantee,
                             "instance_id": tag})
    k = s.kafka
    create_topics(k, [k.topics.events, k.topics.predictions, k.topics.dead_letters], PARTS)
    changelog = create_changelog(s)
    recs = [json.loads(r.value) for r in setup(n_learners=30)[3]]
    sink = KafkaSink(k)
    sink.send(Output(k.topics.events, r["learner_id"].encode(), json.dumps(r).encode()) for r in recs)
    sink.flush(30)
    sink.close()

    def engine(store):
        return build_engine(s, serving, KafkaSource(k, max_poll_records=10), sink_for(s), store=store)

    first = engine(DiesAfterCommit(tmp_path / "state", 10))
    deadline = time.monotonic() + 60
    with pytest.raises(Crash):
        while time.monotonic() < deadline:
            first.step()
    first.close()
    first.state.close()
    second = engine(SqliteStore(tmp_path / "state"))
    tps = [(k.topics.events, p) for p in range(PARTS)]
    mgr = second.state
    while time.monotonic() < deadline + 60 and (len(mgr.assigned) < PARTS or
                                                sum(second.source.committed(tp) or 0 for tp in tps) < len(recs)):
        second.step()
    whole = sum(len(read_partition(k, changelog, p)) for p in range(PARTS))
    assert mgr.restored_records > 0, "the states committed but never written were restored"
    assert 0 < mgr.read_records <= 10 < whole / 4, (mgr.read_records, whole)  # one batch's tail, not the topic
    assert second.metrics.registry.get_sample_value("ktstream_state_restore_read_records_total") == mgr.read_records
    second.close()
    second.state.close()
    events = [Record(r.topic, r.partition, r.offset, r.key, r.value)
              for p in range(PARTS) for r in read_partition(k, k.topics.events, p)]
    _, ref = reference(serving, events, s)
    store = SqliteStore(tmp_path / "state")
    for tp in tps:
        store.open(tp)
    for lid, want in ref.items():
        got = store.load(lid)
        assert got is not None and (got.last_offset, got.events) == (want.last_offset, want.events), lid
        assert all((got.state[n] - v).abs().max() <= 1e-6 for n, v in want.state.items()), lid
    store.close()
