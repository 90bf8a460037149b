"""ConfluentTransactionalSink's reading of librdkafka's transaction errors, with a stand-in client (no broker).

librdkafka classifies each error: retriable (a timed-out ``commit_transaction`` is resumed by calling it
again), ``txn_requires_abort`` (nothing committed: the engine aborts and retries the batch), fatal (fenced:
nothing committed, the producer is dropped). A commit that still fails otherwise has an unknown outcome:
``CommitOutcomeUnknownError``, the producer dropped without an abort, and ``settle`` starts a new one whose
``init_transactions`` finishes it. Runs without confluent-kafka installed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import connectors.kafka.confluent_sink as confluent_sink
from ktstream.config import KafkaSettings, StateSettings
from ktstream.core import Output
from ktstream.engine.exceptions import CommitError, CommitOutcomeUnknownError


class Error:
    def __init__(self, name, retriable=False, abort=False, fatal=False):
        self.name, self._retriable, self._abort, self._fatal = name, retriable, abort, fatal

    def retriable(self):
        return self._retriable

    def txn_requires_abort(self):
        return self._abort

    def fatal(self):
        return self._fatal

    def __str__(self):
        return self.name


class KafkaException(Exception):
    pass


class Producer:
    """Records calls; ``commit_errors`` are raised by successive commit_transaction calls."""

    made: list["Producer"] = []

    def __init__(self, config, logger=None):
        self.config, self.calls, self.commit_errors = config, [], []
        Producer.made.append(self)

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append(name)
            if name == "commit_transaction" and self.commit_errors:
                raise KafkaException(self.commit_errors.pop(0))
            return 0  # flush: nothing left in the queue
        return call


@pytest.fixture
def sink(monkeypatch):
    ck = SimpleNamespace(Producer=Producer, KafkaException=KafkaException,
                         TopicPartition=lambda t, p, o: (t, p, o))
    monkeypatch.setattr(confluent_sink, "confluent_kafka", lambda: ck)
    Producer.made = []
    s = confluent_sink.ConfluentTransactionalSink(KafkaSettings(client="confluent"), StateSettings(instance_id="i"))
    s.begin()
    s.send([Output("out", b"k", b"v")])
    return s


def test_a_timed_out_commit_is_resumed_and_commits(sink):
    sink.producer.commit_errors = [Error("_TIMED_OUT", retriable=True)]
    sink.commit({("ev", 0): 3}, b"group", timeout_s=5.0)
    assert sink.producer.calls.count("commit_transaction") == 2 and not sink.in_transaction
    assert len(Producer.made) == 1


def test_an_abortable_error_is_a_commit_error_and_keeps_the_producer(sink):
    sink.producer.commit_errors = [Error("_TXN_REQUIRES_ABORT", abort=True)]
    with pytest.raises(CommitError) as err:
        sink.commit({("ev", 0): 3}, b"group", timeout_s=5.0)
    assert not isinstance(err.value, CommitOutcomeUnknownError)
    sink.abort()
    assert "abort_transaction" in Producer.made[0].calls and sink._producer is Producer.made[0]


def test_a_fenced_producer_is_a_commit_error_and_is_dropped(sink):
    sink.producer.commit_errors = [Error("_FENCED", fatal=True)]
    with pytest.raises(CommitError) as err:
        sink.commit({("ev", 0): 3}, b"group", timeout_s=5.0)
    assert not isinstance(err.value, CommitOutcomeUnknownError) and sink._producer is None


def test_an_unknown_outcome_drops_the_producer_without_an_abort_and_settle_starts_a_new_one(sink):
    first = sink.producer
    first.commit_errors = [Error("_TRANSPORT")]
    with pytest.raises(CommitOutcomeUnknownError):
        sink.commit({("ev", 0): 3}, b"group", timeout_s=5.0)
    assert sink._producer is None and "abort_transaction" not in first.calls
    sink.settle()
    assert len(Producer.made) == 2 and Producer.made[1].calls == ["init_transactions"]
