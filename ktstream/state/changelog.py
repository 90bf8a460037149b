"""The changelog: every committed learner state also goes to a topic, so a partition's state can move.

One changelog topic per state store, with as many partitions as the input
topic (compacted on a real Kafka: ``cleanup.policy=compact``). A learner's
record goes to the partition of the input partition it came from, keyed by
learner id; its source (topic, partition, offset) travels in the headers and,
because ``Output`` has no headers field the engine's sink would forward, in the
value as well. The value is ``len(meta) (4 bytes, big endian) + meta JSON +
safetensors blob``: self-describing, never pickle.

Restore (``restore``): a partition's store reflects input offset S and
changelog offset X (its checkpoint: the offset after the last changelog record
of the states it holds); the group committed C. Changelog records from X on
whose source offset lies in [S, C) were committed but not yet written locally
(a crash between the commit protocol's steps 3 and 4); apply them, latest per
learner, and write the store at C (and X = the end of what was read) in one
transaction. Records at or beyond C belong to a batch that never committed: it
will be processed again, so they are ignored. Records before X are already in
the store (or belong to batches before S), so only the tail is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable

from ktstream.engine.learner import LearnerState
from ktstream.engine.processor import Batch, Processor
from ktstream.engine.records import Output, Record, TopicPartition
from ktstream.state import codec


@dataclass(frozen=True, slots=True)
class ChangelogOutput(Output):
    """An output for one explicit partition, with headers (the state connectors' sink honours both)."""

    partition: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()


def changelog_topic(events_topic: str, store: str = "learners") -> str:
    return f"{events_topic}.{store}-changelog"


def to_changelog(st: LearnerState, topic: str) -> ChangelogOutput:
    assert st.partition is not None, f"learner {st.learner_id!r} has no source partition"
    row = codec.encode(st)
    blob = row.pop("blob")
    meta = json.dumps(row).encode()
    src = ((("source_topic", st.partition[0].encode()), ("source_partition", str(st.partition[1]).encode()),
            ("source_offset", str(st.last_offset).encode())))
    return ChangelogOutput(topic, st.learner_id.encode(), len(meta).to_bytes(4, "big") + meta + blob,
                           st.partition[1], src)


def from_changelog(value: bytes) -> LearnerState:
    n = int.from_bytes(value[:4], "big")
    row = json.loads(value[4:4 + n])
    row["blob"] = value[4 + n:]
    return codec.decode(row)


class ChangelogProcessor(Processor):
    """A Processor whose batches also carry one changelog record per staged learner."""

    def __init__(self, *args, changelog: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.changelog = changelog

    def process(self, records: list[Record]) -> Batch:
        batch = super().process(records)
        batch.outputs.extend(to_changelog(st, self.changelog) for st in batch.staged)
        return batch


def restore(store, tp: TopicPartition, read: Callable[[int], Iterable[Record]], committed: int) -> tuple[int, int]:
    """Bring ``tp``'s store up to the committed input offset, reading the changelog from the store's
    checkpoint (``read(offset)``: the records of ``tp``'s changelog partition from ``offset`` on).
    Returns (learner states applied, changelog records read)."""
    start = store.open(tp)
    if start >= committed:
        return 0, 0
    since = end = store.changelog_offset(tp)
    latest: dict[str, LearnerState] = {}
    n = 0
    for rec in read(since):
        n, end = n + 1, max(end, rec.offset + 1)
        if rec.value is None:
            continue
        st = from_changelog(rec.value)
        if st.partition == tp and start <= st.last_offset < committed:
            latest[st.learner_id] = st
    store.write(list(latest.values()), {tp: committed}, {tp: end})
    return len(latest), n
