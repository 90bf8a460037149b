"""Settings (YAML, environment, secrets) and the safetensors checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ktstream.config import Settings, load_settings
from ktstream.exceptions import ConfigError
from ktstream.models import names
from ktstream.models.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_configs_load():
    for name in ("default.yaml", "demo.yaml"):
        s = load_settings(ROOT / "ktstream" / "configs" / name)
        assert isinstance(s, Settings)
    assert load_settings(ROOT / "ktstream" / "configs" / "default.yaml") == Settings(), "default.yaml documents the defaults"


def test_environment_overrides_file_and_secrets_stay_secret(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kafka:\n  group_id: from-file\n  topics:\n    events: file-events\nengine:\n  max_batch: 7\n")
    monkeypatch.setenv("KTSTREAM_KAFKA__GROUP_ID", "from-env")
    monkeypatch.setenv("KTSTREAM_KAFKA__SASL_PASSWORD", "hunter2")
    s = load_settings(cfg)
    assert (s.kafka.group_id, s.kafka.topics.events, s.engine.max_batch) == ("from-env", "file-events", 7)
    assert s.kafka.sasl_password.get_secret_value() == "hunter2" and "hunter2" not in repr(s)
    with pytest.raises(Exception):
        s.engine.max_batch = 3  # frozen


@pytest.mark.parametrize("text", ["engine:\n  late_policy: ignore\n", "kafka:\n  bootstrapservers: x\n", "- 1\n"])
def test_bad_config_is_a_config_error(tmp_path, text):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError):
        load_settings(cfg)


@pytest.mark.parametrize("name", names())
def test_checkpoint_round_trip_predicts_the_same(name, tmp_path, kit, make_histories):
    recs = kit.stream(n_learners=3, mean_length=6)
    items, concepts = kit.build_vocabularies(recs)
    model = kit.tiny_model(name, items, concepts, seed=3)
    save_checkpoint(tmp_path / "ck", model, items, concepts, "2024-05-01")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["config.json", "weights.safetensors"]
    loaded, items2, concepts2, version = load_checkpoint(tmp_path / "ck")
    assert version == "2024-05-01" and items2.ids == items.ids and concepts2.ids == concepts.ids
    a, b = kit.offline(model, recs, items, concepts), kit.offline(loaded, recs, items2, concepts2)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_missing_checkpoint_is_reported(tmp_path):
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "nothing-here")
