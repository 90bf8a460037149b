"""The exactly-once sink and the committed reader against the real embedded broker (Tansu).

One producer transaction commits outputs together with the consumer group's
input offsets; an aborted one commits neither; a restarted producer with the
same transactional.id aborts its predecessor's open transaction and fences it.
``read_partition`` returns committed records only, also on Tansu, whose fetch
responses do not list aborted transactions (connectors/kafka/transactional.py).
Each test runs on each client (kafka.client; conftest's ``client``).
"""

from __future__ import annotations

import pytest

from connectors.kafka import source_for, transactional_sink_for
from connectors.kafka.committed import read_partition
from ktstream.config import StateSettings
from ktstream.core import Output
from ktstream.engine.exceptions import CommitError
from tests.connectors.kafka.test_kafka_source_sink import consume, publish

pytestmark = pytest.mark.broker


def test_commit_abort_restart_and_fencing(kafka_settings, topic, wait):
    s, src_topic, out = kafka_settings(), topic(1), topic(1)
    publish(s, src_topic, 9, learners=3)
    src = source_for(s, topics=[src_topic])
    recs = consume(src, 9, wait)
    tp, gm = (src_topic, 0), src.group_metadata()
    state = StateSettings(instance_id="tx-test")

    def outputs(values):
        return [Output(out, b"k", v.encode()) for v in values]

    sink = transactional_sink_for(s, state)
    sink.begin()
    sink.send(outputs(["c0", "c1", "c2"]))
    sink.commit({tp: 3}, gm)
    assert src.committed(tp) == 3 and sink.acked[(out, 0)] == 3
    sink.begin()
    sink.send(outputs(["a3", "a4", "a5"]))
    sink.producer.flush(10)  # in the log before the ABORT marker (Tansu then serves them even to read_committed)
    sink.abort()
    assert src.committed(tp) == 3, "an aborted transaction commits no offsets"
    sink.begin()
    sink.send(outputs(["d3"]))
    sink.producer.flush(10)  # sent, never committed: the process "dies" here
    restarted = transactional_sink_for(s, state)  # same transactional.id: aborts the open transaction, fences `sink`
    restarted.begin()
    restarted.send(outputs(["c3", "c4", "c5"]))
    restarted.commit({tp: 6}, gm)
    assert src.committed(tp) == 6
    with pytest.raises(CommitError):
        sink.commit({tp: 9}, gm)  # the zombie is fenced
    sink.abort()
    assert src.committed(tp) == 6
    got = read_partition(s, out, 0)
    assert [r.value.decode() for r in got] == ["c0", "c1", "c2", "c3", "c4", "c5"]
    assert [r.value.decode() for r in read_partition(s, out, 0, start=got[3].offset)] == ["c3", "c4", "c5"]
    restarted.close()
    sink.close()
    src.close()
    assert len(recs) == 9
