"""The changelog: every committed learner state also goes to a topic, so a partition's state can move.

One changelog topic per state store, with as many partitions as the input
topic (compacted on a real Kafka: ``cleanup.policy=compact``). A learner's
record goes to the partition of the input partition it came from, keyed by
learner id; its source (topic, partition, offset) travels in the headers and
in the value as well (a restore reads only the value). The value is ``len(meta) (4 bytes, big endian) + meta JSON +
safetensors blob``: self-describing, never pickle.

Every record also names its writer's generation (``generation`` in the value and
the ``writer_generation`` header): the consumer group generation in which the
writing instance was assigned the partition (-1: unknown).

Restore (``restore``): a partition's store reflects input offset S and
changelog offset X (its checkpoint: the offset after the last changelog record
of the states it holds); the group committed C. Changelog records from X on
whose source offset lies in [S, C) were committed but not yet written locally
(a crash between the commit protocol's steps 3 and 4); apply, per learner, the
newest of them, and write the store at C (and X = the end of what was read) in
one transaction. Newest means the highest source offset, then the newest
writer generation; never the last in the log: an old owner that flushes late
(at-least-once) appends an older state after a newer one. The owner that
committed C processed every offset in [S, C), so its record for a learner has
a source offset at least as high as any late write of an old owner; at an
equal source offset (the old owner processed the same event, perhaps with an
older model version) the newer generation wins. Records at or beyond C belong
to a batch that never committed: it will be processed again, so they are
ignored. Records before X are already in the store (or belong to batches
before S), so only the tail is read. The read is streamed: memory holds one
encoded record per learner, and nothing is written unless the read reached its
end (a failed read leaves the store as it was, for a retry).
"""

from __future__ import annotations

import json
from typing import Callable, Iterable

from ktstream.core import LearnerState, Output, Record, TopicPartition
from ktstream.state import codec
from ktstream.state.store import Store


def changelog_topic(events_topic: str, store: str = "learners") -> str:
    return f"{events_topic}.{store}-changelog"


def to_changelog(st: LearnerState, topic: str, generation: int = -1) -> Output:
    """``st``'s changelog record: to the partition of its source partition, keyed by learner id."""
    assert st.partition is not None, f"learner {st.learner_id!r} has no source partition"
    row = codec.encode(st)
    blob = row.pop("blob")
    row["generation"] = generation
    meta = json.dumps(row).encode()
    src = ((("source_topic", st.partition[0].encode()), ("source_partition", str(st.partition[1]).encode()),
            ("source_offset", str(st.last_offset).encode()), ("writer_generation", str(generation).encode())))
    return Output(topic, st.learner_id.encode(), len(meta).to_bytes(4, "big") + meta + blob, st.partition[1], src)


def changelog_meta(value: bytes) -> dict:
    """A changelog value's bookkeeping (learner, source, generation) without decoding its tensors."""
    n = int.from_bytes(value[:4], "big")
    return json.loads(value[4:4 + n])


def from_changelog(value: bytes) -> LearnerState:
    row = changelog_meta(value)
    row.pop("generation", None)
    row["blob"] = value[4 + int.from_bytes(value[:4], "big"):]
    return codec.decode(row)


class NewestStates:
    """Per learner, the encoded changelog record of its newest state among those a restore applies.

    >>> import torch
    >>> def rec(offset, generation):
    ...     st = LearnerState("a", {"h": torch.zeros(1)}, "v", ("ev", 0), last_offset=offset)
    ...     return to_changelog(st, "cl", generation).value
    >>> newest = NewestStates(("ev", 0), start=0, committed=10)
    >>> for value in (rec(3, 1), rec(7, 2), rec(5, 1), rec(7, 1), rec(12, 2)):  # late old owner; uncommitted
    ...     newest.offer(value)
    >>> [(st.last_offset, st.learner_id) for st in newest.states()]
    [(7, 'a')]
    """

    def __init__(self, tp: TopicPartition, start: int, committed: int):
        self.tp, self.start, self.committed = tp, start, committed
        self.best: dict[str, tuple[int, int, bytes]] = {}  # learner -> (source offset, generation, value)

    def offer(self, value: bytes) -> None:
        meta = changelog_meta(value)
        offset, generation = int(meta["last_offset"]), int(meta.get("generation", -1))
        if (meta["topic"], meta["part"]) != tuple(self.tp) or not self.start <= offset < self.committed:
            return
        kept = self.best.get(meta["learner_id"])
        if kept is None or (offset, generation) >= kept[:2]:  # equal: the later in the log
            self.best[meta["learner_id"]] = (offset, generation, value)

    def states(self) -> list[LearnerState]:
        return [from_changelog(value) for _, _, value in self.best.values()]


def restore(store: Store, tp: TopicPartition, read: Callable[[int], Iterable[Record]],
            committed: int) -> tuple[int, int]:
    """Bring ``tp``'s store up to the committed input offset, reading the changelog from the store's
    checkpoint (``read(offset)``: the records of ``tp``'s changelog partition from ``offset`` to the
    end taken when the read starts). Returns (learner states applied, changelog records read).
    An error from ``read`` propagates and nothing is written."""
    start = store.open(tp)
    if start >= committed:
        return 0, 0
    part = store.partition(tp)
    since = end = part.changelog_offset()
    newest = NewestStates(tp, start, committed)
    n = 0
    for rec in read(since):
        n, end = n + 1, max(end, rec.offset + 1)
        if rec.value is not None:
            newest.offer(rec.value)
    states = newest.states()
    tx = part.begin()
    for st in states:
        tx.put(st)
    tx.commit(committed, end)
    return len(states), n
