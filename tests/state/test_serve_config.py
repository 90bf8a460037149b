"""`ktstream serve` builds the durable path from settings: one builder, environment overrides, hot swap kept."""

from __future__ import annotations

from ktstream.config import load_settings
from ktstream.engine.records import MemorySink, MemorySource
from ktstream.models.checkpoint import ServingModel
from ktstream.service import build_engine
from ktstream.state.manager import StateManager
from ktstream.state.sqlite import SqliteStore
from tests.state.test_store_engine import setup


class Source(MemorySource):
    def read_partition(self, topic, partition, start=0):
        return []


def test_state_section_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KTSTREAM_STATE__DIR", str(tmp_path / "st"))
    monkeypatch.setenv("KTSTREAM_STATE__PROCESSING_GUARANTEE", "exactly-once")
    s = load_settings(None, state={"dir": "/elsewhere", "fp16": True})
    assert (s.state.dir, s.state.processing_guarantee, s.state.fp16) == (str(tmp_path / "st"), "exactly-once", True)
    assert load_settings(None).state.dir == str(tmp_path / "st")
    monkeypatch.delenv("KTSTREAM_STATE__DIR")
    assert load_settings(None).state.dir is None


def test_one_builder_for_both_paths_keeps_the_registry_watcher(tmp_path):
    model, items, concepts, records, _ = setup(n_learners=4)
    serving = ServingModel(model, items, concepts, "v0")
    plain = build_engine(load_settings(None, model={"registry": str(tmp_path / "reg")}), serving, Source(),
                         MemorySink())
    assert type(plain.processor).__name__ == "Processor" and plain.cache.store is None
    assert plain.state is None and plain.watcher is not None and not plain.transactional
    settings = load_settings(None, model={"registry": str(tmp_path / "reg")},
                             kafka={"topics": {"events": "ev"}}, state={"dir": str(tmp_path / "st"), "fp16": True})
    src = Source(records)
    durable = build_engine(settings, serving, src, MemorySink())
    assert type(durable.processor).__name__ == "Processor" and durable.watcher is not None
    assert isinstance(durable.state, StateManager) and durable.state.changelog_topic == "ev.learners-changelog"
    assert durable.cache.store is durable.state, "the cache writes through the state collaborator"
    assert src.on_assigned == durable.on_assigned, "the engine's own callbacks, set once"
    while src.pending:
        durable.step()
    durable.state.close()
    store = SqliteStore(tmp_path / "st")
    assert sum(store.open(tp) for tp in {r.tp for r in records}) == len(records)  # written, offsets included
    assert store.fp16 is False and durable.state.store.fp16 is True
    store.close()
