"""Bad registry versions: the engine keeps serving its current version, and a restart does not crash-loop.

Each fault is a promoted version whose files cannot serve: truncated weights, an unknown family,
weights whose shapes do not fit the config, and vocabularies larger than the model embeds. The engine
(as ``ktstream serve`` builds it, watching the registry) sees it appear half-way through the
stream; every prediction must still be version 1's, equal to the offline replay within 1e-6, with
the failure counted once. A restart with the bad version still the latest serves the newest good one
(or, when no version loads, the configured checkpoint) and says so in the log.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from ktstream.cli.serve import load_model
from ktstream.config import load_settings
from ktstream.engine import MemorySink, MemorySource
from ktstream.finetune.registry import ModelRegistry
from ktstream.models.checkpoint import CONFIG, WEIGHTS, ServingModel, save_checkpoint
from ktstream.service import build_engine
from tests.state.test_store_engine import setup


def _truncate_weights(folder):
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])


def _edit_config(change):
    def edit(folder):
        meta = json.loads((folder / CONFIG).read_text())
        change(meta)
        (folder / CONFIG).write_text(json.dumps(meta))
    return edit


FAULTS = {
    "truncated-weights": _truncate_weights,
    "unknown-family": _edit_config(lambda m: m.update(family="no-such-family")),
    "shape-mismatch": _edit_config(lambda m: m["config"].update(hidden=m["config"]["hidden"] + 3)),
    "vocabulary-beyond-the-model": _edit_config(lambda m: m["items"].extend(f"extra-{i}" for i in range(50))),
}


def publish_bad(registry: ModelRegistry, serving: ServingModel, fault: str) -> str:
    """A version published whole, then damaged in place (as a half-copied or hand-edited folder would be)."""
    version = registry.publish(serving.model, serving.items, serving.concepts, {"note": fault})
    folder = registry.root / "versions" / version
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o644)
    FAULTS[fault](folder)
    return version


def settings_for(tmp_path, **model):
    return load_settings(None, kafka={"topics": {"events": "ev", "predictions": "pred", "dead_letters": "dead"}},
                         engine={"max_batch": 9, "describe": False},
                         model={"family": "dkt", "registry": str(tmp_path / "registry"), "registry_poll_s": 1e-6,
                                **model})


@pytest.fixture(scope="module")
def world():
    model, items, concepts, records, reference = setup(n_learners=12)
    return ServingModel(model, items, concepts, "v000001"), records, reference


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_bad_registry_version_leaves_the_current_version_serving(world, tmp_path, fault, caplog):
    good, records, reference = world
    registry = ModelRegistry(tmp_path / "registry")
    assert registry.publish(good.model, good.items, good.concepts, {"note": "good"}) == "v000001"
    settings = settings_for(tmp_path)
    serving = load_model(settings.model)
    assert serving.version == "v000001"
    source, sink = MemorySource(records), MemorySink()
    engine = build_engine(settings, serving, source, sink)
    half = len(records) // 2
    while len(source.pending) > half:
        engine.step()
    bad = publish_bad(registry, good, fault)
    with caplog.at_level(logging.ERROR, logger="ktstream.finetune.watcher"):
        while source.pending:
            engine.step()
    preds = [json.loads(o.value) for o in sink.flushed if o.topic == "pred"]
    assert sorted(p["event_id"] for p in preds) == sorted(reference), "every event predicted"
    assert {p["model_version"] for p in preds} == {"v000001"}
    for p in preds:
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]
    assert engine.metrics.registry.get_sample_value("ktstream_model_load_failures_total") == 1
    assert any(bad in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert engine.healthy()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_bad_registry_version_at_restart_serves_the_newest_good_one(world, tmp_path, fault, caplog):
    good, records, reference = world
    registry = ModelRegistry(tmp_path / "registry")
    registry.publish(good.model, good.items, good.concepts, {"note": "good"})
    bad = publish_bad(registry, good, fault)
    settings = settings_for(tmp_path)
    with caplog.at_level(logging.ERROR, logger="ktstream.cli.serve"):
        serving = load_model(settings.model)
    assert serving.version == "v000001"
    assert any(bad in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR), "said loudly"
    source, sink = MemorySource(records), MemorySink()
    engine = build_engine(settings, serving, source, sink)
    while source.pending:
        engine.step()
    preds = [json.loads(o.value) for o in sink.flushed if o.topic == "pred"]
    assert len(preds) == len(reference) and {p["model_version"] for p in preds} == {"v000001"}
    for p in preds:
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]
    # the watcher tried the bad latest version once more, and counted it
    assert engine.metrics.registry.get_sample_value("ktstream_model_load_failures_total") == 1


def test_bad_registry_versions_only_fall_back_to_the_configured_checkpoint(world, tmp_path, caplog):
    good, _, _ = world
    registry = ModelRegistry(tmp_path / "registry")
    publish_bad(registry, good, "truncated-weights")
    publish_bad(registry, good, "unknown-family")
    checkpoint = save_checkpoint(tmp_path / "checkpoint", good.model, good.items, good.concepts, "ckpt-1")
    with caplog.at_level(logging.ERROR, logger="ktstream.cli.serve"):
        serving = load_model(settings_for(tmp_path, checkpoint=str(checkpoint)).model)
    assert serving.version == "ckpt-1"
    logged = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert "v000001" in logged and "v000002" in logged
