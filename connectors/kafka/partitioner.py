"""Kafka's default key partitioning, with each key's hash remembered.

kafka-python's ``DefaultPartitioner`` hashes every keyed record with a
pure-Python murmur2 and re-reads the cluster metadata around it: about a
quarter of the producer's ``send``. The engine keys every output by learner
id, so the same few thousand keys come back again and again. This partitioner
gives the same partition as the default one (the Java client's
``murmur2(key) & 0x7fffffff % partitions``, over the sorted partition ids) and
keeps up to ``max_keys`` hashes (the dict is cleared when full).

>>> class Cluster:
...     def partitions_for_topic(self, topic): return {0, 1, 2, 3}
...     def available_partitions_for_topic(self, topic): return {0, 1, 2, 3}
...     def topics(self): return {"t"}
>>> from kafka.partitioner.default import DefaultPartitioner
>>> keys = [f"learner-{i}".encode() for i in range(50)]
>>> mine, stock = CachedKeyPartitioner(), DefaultPartitioner()
>>> all(mine.partition("t", k, k, None, None, Cluster()) == stock.partition("t", k, k, None, None, Cluster())
...     for k in keys + keys)
True
"""

from __future__ import annotations

from kafka.partitioner.abc import Partitioner
from kafka.partitioner.default import DefaultPartitioner, murmur2


class CachedKeyPartitioner(Partitioner):
    def __init__(self, max_keys: int = 1 << 20):
        self.max_keys = max_keys
        self._hashes: dict[bytes, int] = {}
        self._default = DefaultPartitioner()

    def partition(self, topic, key, serialized_key, value, serialized_value, cluster):
        if serialized_key is None:  # no key: the default's random choice among available partitions
            return self._default.partition(topic, key, serialized_key, value, serialized_value, cluster)
        partitions = cluster.partitions_for_topic(topic)
        if not partitions:
            raise ValueError(f"Topic {topic} not found in ClusterMetadata")
        h = self._hashes.get(serialized_key)
        if h is None:
            if len(self._hashes) >= self.max_keys:
                self._hashes.clear()
            h = self._hashes[serialized_key] = murmur2(serialized_key) & 0x7FFFFFFF
        ordered = sorted(partitions)
        return ordered[h % len(ordered)]
