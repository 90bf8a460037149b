"""Settings of ``ktstream trainer`` (and the YAML reading ``ktstream archive`` shares): frozen pydantic models.

A trainer config file holds a ``trainer`` section; other sections are ignored,
so one file can also carry ``kafka`` and ``archive`` for ``ktstream archive``.
As for ``ktstream serve``, environment variables override the file:
``KTSTREAM_<SECTION>__<FIELD>[__<SUBFIELD>]`` (values are JSON where they parse
as JSON, else strings), e.g. ``KTSTREAM_TRAINER__REGISTRY=/mnt/registry`` or
``KTSTREAM_TRAINER__FINETUNE__EPOCHS=3``.

>>> s = TrainerSettings(archive="a", registry="r", finetune={"epochs": 2}, gate={"random_label_epochs": 1},
...                     scan={"memory_limit": "3GB"})
>>> s.finetune_config().epochs, s.promotion_config().gate.random_label_epochs, s.horizon_ms
(2, 1, 604800000)
>>> s.scan_config().rows_sorted_at_once()
12000000
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import json
import os

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ktstream.config import read_sections
from ktstream.data.columnar import ScanConfig
from ktstream.exceptions import ConfigError
from ktstream.finetune.finetune import FinetuneConfig
from ktstream.finetune.promotion import PromotionConfig
from ktstream.leakage import GateConfig

DAY_MS = 86_400_000


class TrainerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    archive: str = Field(description="event archive folder (written by `ktstream archive`)")
    registry: str = Field(description="model registry folder")
    family: str = Field("dkt", description="model family trained when the registry is empty")
    model_kwargs: dict[str, Any] = Field(default_factory=dict, description="its constructor arguments")
    horizon_days: float = Field(7.0, gt=0, description="H: selection [C, C+H), promotion [C+H, C+2H)")
    every_days: float | None = Field(7.0, gt=0, description="event time between cycles")
    every_events: int | None = Field(None, ge=1, description="or: archived events between cycles")
    lateness_s: float = Field(0.0, ge=0, description="watermark = newest archived event time minus this")
    poll_s: float = Field(60.0, gt=0, description="how often the archive is looked at (wall clock)")
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(9465, ge=0, le=65535, description="Prometheus /metrics; None: off")
    finetune: dict[str, Any] = Field(default_factory=dict, description="FinetuneConfig fields")
    promotion: dict[str, Any] = Field(default_factory=dict, description="PromotionConfig fields but gate")
    gate: dict[str, Any] = Field(default_factory=dict, description="ktstream.leakage GateConfig fields")
    scan: dict[str, Any] = Field(default_factory=dict, description="ktstream.data.columnar ScanConfig fields: "
                                 "DuckDB's memory_limit, threads, temp_directory, sort_rows")
    train_buffer_events: int = Field(2_000_000, ge=1, description="training positions a cycle holds at once "
                                     "(its training window is streamed from the archive in buffers of this size)")

    @model_validator(mode="after")
    def _some_trigger(self) -> "TrainerSettings":
        if self.every_days is None and self.every_events is None:
            raise ValueError("set every_days or every_events (or both)")
        self.scan_config()  # a scan DuckDB could not be sized for is refused with the file, not at a cycle
        return self

    @property
    def horizon_ms(self) -> int:
        return int(self.horizon_days * DAY_MS)

    @property
    def every_ms(self) -> int | None:
        return None if self.every_days is None else int(self.every_days * DAY_MS)

    def finetune_config(self) -> FinetuneConfig:
        return _build(FinetuneConfig, self.finetune, "trainer.finetune")

    def scan_config(self) -> ScanConfig:
        return _build(ScanConfig, self.scan, "trainer.scan")

    def promotion_config(self) -> PromotionConfig:
        gate = _build(GateConfig, self.gate, "trainer.gate")
        return _build(PromotionConfig, {**self.promotion, "gate": gate}, "trainer.promotion")


def _build(cls, values: dict[str, Any], where: str):
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {where}: {exc}") from exc


def env_overrides(name: str, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Nested values of section ``name`` from ``KTSTREAM_<NAME>__...`` variables.

    >>> env_overrides("trainer", {"KTSTREAM_TRAINER__FINETUNE__EPOCHS": "3", "KTSTREAM_TRAINER__FAMILY": "sakt",
    ...                           "KTSTREAM_KAFKA__GROUP_ID": "g"})
    {'finetune': {'epochs': 3}, 'family': 'sakt'}
    """
    prefix = f"KTSTREAM_{name.upper()}__"
    out: dict[str, Any] = {}
    for key, raw in (os.environ if environ is None else environ).items():
        if not key.upper().startswith(prefix):
            continue
        *parents, leaf = key[len(prefix):].lower().split("__")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        try:
            node[leaf] = json.loads(raw)
        except ValueError:
            node[leaf] = raw
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def section(path: str | Path, name: str, model: type[BaseModel]) -> BaseModel:
    """Validate section ``name`` of the file with ``model``, environment over file (an absent
    section takes the defaults)."""
    try:
        return model(**_merge(read_sections(path).get(name) or {}, env_overrides(name)))
    except ValueError as exc:
        raise ConfigError(f"invalid section {name!r} in {path} (or its KTSTREAM_{name.upper()}__* "
                          f"variables): {exc}") from exc
