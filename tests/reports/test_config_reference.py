"""docs/configuration.md and docs/schemas/*.json are exactly what the code generates (no drift)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from ktstream.cli.main import main
from ktstream.config import Settings
from ktstream.reports.config_reference import config_reference, type_name
from ktstream.schema import json_schemas

DOCS = Path(__file__).resolve().parents[2] / "docs"
REGENERATE = "run: ktstream config-reference -o docs/configuration.md --schemas docs/schemas"


def leaves(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += leaves(ann, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def test_configuration_reference_matches_the_code():
    assert (DOCS / "configuration.md").read_text(encoding="utf-8") == config_reference(), \
        f"docs/configuration.md is stale; {REGENERATE}"


def test_json_schemas_match_the_code():
    schemas = json_schemas()
    assert sorted(p.stem for p in (DOCS / "schemas").glob("*.json")) == sorted(schemas), REGENERATE
    for name, schema in schemas.items():
        assert json.loads((DOCS / "schemas" / f"{name}.json").read_text(encoding="utf-8")) == schema, \
            f"docs/schemas/{name}.json is stale; {REGENERATE}"


def test_every_setting_is_listed_with_its_environment_variable():
    text = config_reference()
    keys = leaves(Settings)
    assert len(keys) > 30
    for key in keys:
        env = "KTSTREAM_" + key.upper().replace(".", "__")
        assert f"| `{key}` |" in text and f"`{env}`" in text, key
    for key in ("archive.folder", "trainer.horizon_days", "trainer.finetune.epochs", "trainer.gate.z"):
        assert f"| `{key}` |" in text, key


def test_environment_variables_listed_really_override(monkeypatch):
    """The documented naming is the one pydantic-settings applies."""
    from ktstream.config import load_settings

    monkeypatch.setenv("KTSTREAM_KAFKA__TOPICS__EVENTS", "from-env")
    monkeypatch.setenv("KTSTREAM_ENGINE__MAX_BATCH", "7")
    s = load_settings(None)
    assert (s.kafka.topics.events, s.engine.max_batch) == ("from-env", 7)


def test_type_names_are_table_safe():
    from typing import Literal

    assert type_name(Literal["a", "b"]) == 'one of "a", "b"'
    assert type_name(int | None) == "int or null"
    assert "|" not in type_name(dict[str, int] | None)


def test_cli_writes_the_same_documents(tmp_path, capsys):
    assert main(["config-reference", "-o", str(tmp_path / "c.md"), "--schemas", str(tmp_path / "s")]) == 0
    assert (tmp_path / "c.md").read_text() == (DOCS / "configuration.md").read_text()
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted(p.name for p in (DOCS / "schemas").iterdir())
    assert main(["config-reference"]) == 0
    assert capsys.readouterr().out.endswith(config_reference())
