"""Model registry: immutable versions, atomic publish, JSON + safetensors only; the watcher."""

from __future__ import annotations

import hashlib
import json
import stat

import pytest
import torch

from ktstream.data.vocab import Vocabulary
from ktstream.finetune import registry as registry_module
from ktstream.finetune.exceptions import RegistryError
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.watcher import RegistryWatcher
from ktstream.models import create

ITEMS, CONCEPTS = Vocabulary(["q1", "q2", "q3"]), Vocabulary(["c1", "c2"])


def model(seed: int):
    torch.manual_seed(seed)
    return create("dkt", n_items=5, n_concepts=4, dim=8, hidden=8).eval()


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_publish_get_round_trip(tmp_path):
    reg = ModelRegistry(tmp_path)
    m = model(0)
    v = reg.publish(m, ITEMS, CONCEPTS, {"window": {"cutoff_ms": 5, "horizon_ms": 2, "train_events": 10}})
    assert v == "v000001" and reg.latest() == v
    got = reg.get(v)
    assert got.version == v and got.items.ids == ITEMS.ids and got.concepts.ids == CONCEPTS.ids
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), got.model.state_dict().values()))
    assert got.metrics["window"]["cutoff_ms"] == 5 and got.metrics["version"] == v
    config = json.loads((got.path / "config.json").read_text())
    assert config["family"] == "dkt" and config["config"]["n_items"] == 5 and config["items"] == ITEMS.ids


def test_files_are_json_and_safetensors_only_never_pickle(tmp_path):
    reg = ModelRegistry(tmp_path)
    reg.publish(model(0), ITEMS, CONCEPTS, {})
    reg.reject(model(1), ITEMS, CONCEPTS, {"reasons": ["worse"]})
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != ".lock"]
    assert files and all(p.suffix in (".json", ".safetensors") for p in files)
    for p in files:
        head = p.read_bytes()[:2]
        assert head[:1] != b"\x80" and head != b"PK", f"{p} looks like a pickle / torch.save zip"
    (reg.root / "versions" / "v000001").chmod(0o755)
    (reg.root / "versions" / "v000001" / "extra.pt").write_bytes(b"\x80\x04")
    with pytest.raises(RegistryError, match="not JSON / safetensors"):
        reg.get("v000001")


def test_versions_are_immutable(tmp_path):
    reg = ModelRegistry(tmp_path)
    v1 = reg.publish(model(0), ITEMS, CONCEPTS, {"n": 1})
    before = digest(reg.root / "versions" / v1)
    v2 = reg.publish(model(1), ITEMS, CONCEPTS, {"n": 2})
    assert (v1, v2) == ("v000001", "v000002") and reg.latest() == v2
    with pytest.raises(RegistryError, match="immutable"):
        reg.publish(model(2), ITEMS, CONCEPTS, {"n": 3}, version=v1)
    assert digest(reg.root / "versions" / v1) == before and reg.metrics(v1)["n"] == 1
    folder = reg.root / "versions" / v1
    assert not folder.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert all(not p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) for p in folder.iterdir())


def test_publish_is_atomic_when_writing_fails(tmp_path, monkeypatch):
    reg = ModelRegistry(tmp_path)
    reg.publish(model(0), ITEMS, CONCEPTS, {})
    real = registry_module.save_checkpoint

    def half_written(directory, *args):
        real(directory, *args)
        raise OSError("disk full")

    monkeypatch.setattr(registry_module, "save_checkpoint", half_written)
    with pytest.raises(OSError):
        reg.publish(model(1), ITEMS, CONCEPTS, {})
    assert reg.versions() == ["v000001"] and reg.latest() == "v000001"
    assert not any((reg.root / ".tmp").iterdir()), "the half-written staging folder is cleaned up"
    assert reg.get("v000001").version == "v000001"


def test_rejected_candidates_are_kept_with_their_report(tmp_path):
    reg = ModelRegistry(tmp_path)
    name = reg.reject(model(3), ITEMS, CONCEPTS, {"reasons": ["auc 0.61 vs 0.70"]}, label="c123")
    assert reg.latest() is None and reg.rejected() == [name] and "c123" in name
    assert reg.rejected_report(name)["reasons"] == ["auc 0.61 vs 0.70"]
    assert {p.name for p in (reg.root / "rejected" / name).iterdir()} == {"config.json", "weights.safetensors",
                                                                          "report.json"}


def test_watcher_calls_back_once_per_new_version_and_respects_its_interval(tmp_path):
    reg = ModelRegistry(tmp_path)
    now = [0.0]
    seen = []
    w = RegistryWatcher(reg, lambda v: seen.append(v.version), interval_s=5.0, clock=lambda: now[0])
    assert w.poll() is None
    reg.publish(model(0), ITEMS, CONCEPTS, {})
    assert w.poll() is None  # within the interval: the registry is not even read
    now[0] = 5.0
    assert w.poll().version == "v000001"
    now[0] = 10.0
    assert w.poll() is None and seen == ["v000001"]
    reg.publish(model(1), ITEMS, CONCEPTS, {})
    now[0] = 15.0
    assert w.poll().version == "v000002" and seen == ["v000001", "v000002"] and w.current == "v000002"


def test_watcher_skips_an_unreadable_version_and_keeps_serving(tmp_path):
    reg = ModelRegistry(tmp_path)
    reg.publish(model(0), ITEMS, CONCEPTS, {})
    seen = []
    w = RegistryWatcher(reg, lambda v: seen.append(v.version), current="v000001", interval_s=0.0)
    broken = reg.root / "versions" / "v000002"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert w.poll() is None and w.poll() is None and seen == [] and w.current == "v000001"
