"""Hostile records through the engine and the archiver: nothing crashes, every input offset is accounted for.

Each case (tests/support/hostile.py names them after the fault) is mixed into valid traffic and sent
through the engine (in-memory source and sink, the default processor settings) and through the
archiver. Every input offset must come out as exactly one prediction or one dead letter among the
engine's committed outputs, of the kind the case expects, all offsets committed, and the engine must
still serve a valid event afterwards; the archiver must write every record it archives as one row
and dead-letter every other one.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from connectors.archive import Archiver, ArchiveSettings, ArchiveWriter
from ktstream.core import Record
from ktstream.data.archive_reader import archive_files
from ktstream.data.eventlog import iter_parquet
from ktstream.data.vocab import Vocabulary
from ktstream.engine import MemorySink, MemorySource, StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.models import create, family
from ktstream.serving.runner import ModelRunner
from tests.support.hostile import CASES, CONCEPTS, ITEMS, MAX_RECORD_BYTES, accounting, as_records, hostile_corpus

EVENTS, PREDICTIONS, DEAD = "h.events", "h.predictions", "h.dead"
PARTITIONS = 3


def engine_for(records: list[Record]) -> tuple[Engine, MemorySource, MemorySink]:
    torch.manual_seed(0)
    items, concepts = Vocabulary.build(ITEMS), Vocabulary.build(CONCEPTS)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), n_categories=2,
                   **family("dkt").tiny_config).eval()
    source, sink = MemorySource(records), MemorySink()
    processor = Processor(ModelRunner(model, items, concepts, "v0"), StateCache(1 << 30), PREDICTIONS, DEAD,
                          "dead-letter", MAX_RECORD_BYTES)
    return Engine(source, sink, processor, max_batch=64), source, sink


def last_offsets(records: list[Record]) -> dict[tuple[str, int], int]:
    return {tp: max(r.offset for r in records if r.tp == tp) + 1 for tp in {r.tp for r in records}}


def through_the_engine(corpus) -> None:
    records = as_records(corpus, EVENTS, PARTITIONS)
    engine, source, sink = engine_for(records)
    while source.pending:
        engine.step()
    expected = {(r.topic, r.partition, r.offset): e.engine for r, (*_, e) in zip(records, corpus)}
    assert accounting(expected, [o.value for o in sink.flushed]) == []
    assert source.committed == last_offsets(records)
    still = Record(EVENTS, 0, records[-1].offset + 10, b"after", json.dumps(
        {"event_id": "after-1", "learner_id": "after", "item_id": "q1", "response": 1}).encode())
    source.pending.append(still)
    engine.step()
    assert [json.loads(o.value)["event_id"] for o in sink.flushed[-1:]] == ["after-1"], "the engine stopped serving"


def through_the_archiver(corpus, folder) -> None:
    records = as_records(corpus, EVENTS, PARTITIONS)
    source, dead = MemorySource(records), MemorySink()
    archiver = Archiver(source, ArchiveWriter(folder, flush_records=50), dead, ArchiveSettings(dead_letter_topic=DEAD))
    while archiver.step(0.0, 64):
        pass
    archiver.flush()
    expected_dead = {(r.topic, r.partition, r.offset): e.archive for r, (*_, e) in zip(records, corpus)
                     if e.archive != "archived"}
    assert accounting(expected_dead, [o.value for o in dead.flushed]) == []
    archived = Counter((row["learner_id"], row["event_id"]) for path in archive_files(folder)
                       for row in iter_parquet(path))
    wanted = Counter((json.loads(v)["learner_id"], json.loads(v)["event_id"]) for _, v, e in corpus
                     if e.archive == "archived")
    assert archived == wanted, "every archived record is one row"
    assert source.committed == last_offsets(records)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_records_through_the_engine(case):
    corpus = hostile_corpus(60, seed=len(case), cases=[case])
    assert sum(e.case == case for *_, e in corpus) >= 1
    through_the_engine(corpus)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_records_through_the_archiver(case, tmp_path):
    corpus = hostile_corpus(60, seed=len(case), cases=[case])
    through_the_archiver(corpus, tmp_path)


def test_a_mixed_hostile_corpus_through_engine_and_archiver(tmp_path):
    """Every case at once, 30% of 1,500 records: the same corpus through both consumers."""
    corpus = hostile_corpus(1500, seed=7)
    assert {e.case for *_, e in corpus} == set(CASES) | {"valid"}
    through_the_engine(corpus)
    through_the_archiver(corpus, tmp_path)
