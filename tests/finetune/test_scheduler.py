"""The trainer loop: cycles when due (event time or event count), resumes from the registry; CLI; metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from connectors.archive import ArchiveWriter
from ktstream.cli.main import main
from ktstream.data.simulate import simulate
from ktstream.finetune.metrics import SERIES, FinetuneMetrics
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.scheduler import Trainer
from ktstream.finetune.settings import TrainerSettings
from ktstream.leakage import ALL_CHECKS
from tests.finetune.conftest import DAY_MS, TINY_DKT, fast_gate, fast_promotion, tiny_finetune

# scheduling is under test here; the random-label check (the gate's costly one) is exercised in test_promotion
GATE = fast_gate(checks=[c for c in ALL_CHECKS if c != "random_labels"])


@pytest.fixture
def stream():
    return simulate(n_learners=60, n_items=20, n_concepts=5, mean_length=30, seed=4,
                    start_spread_ms=8 * DAY_MS, mean_gap_ms=2 * 3_600_000)


def archive(folder, recs, first_offset=0):
    w = ArchiveWriter(folder)
    for i, r in enumerate(recs):
        w.add(("events", 0), first_offset + i, r)
    w.flush()


def trainer(tmp_path, **kw) -> Trainer:
    args = dict(horizon_ms=DAY_MS, every_ms=2 * DAY_MS, family="dkt", model_kwargs=TINY_DKT,
                ft=tiny_finetune(epochs=1), promotion=fast_promotion(gate=GATE, bootstrap=50))
    return Trainer(str(tmp_path / "archive"), ModelRegistry(tmp_path / "registry"), **{**args, **kw})


def test_cycles_run_when_due_and_resume_from_the_registry(tmp_path, stream):
    times = np.array([r["event_time"] for r in stream])
    split = int(np.quantile(times, 0.6))
    early = [r for r in stream if r["event_time"] < split]
    archive(tmp_path / "archive", early)
    t = trainer(tmp_path)
    first = t.run_once()
    assert first.outcome == "promoted" and first.name == "v000001" and first.parent is None
    assert first.cutoff_ms == max(r["event_time"] for r in early) - 2 * DAY_MS
    assert first.window["train_events"] == sum(r["event_time"] < first.cutoff_ms for r in early)
    assert t.run_once() is None, "nothing new archived: not due"
    archive(tmp_path / "archive", [r for r in stream if r["event_time"] >= split], first_offset=len(early))
    second = t.run_once()
    assert second.parent == "v000001" and second.cutoff_ms - first.cutoff_ms >= 2 * DAY_MS
    assert second.outcome in ("promoted", "rejected") and second.decision["comparison"] is not None
    reg = ModelRegistry(tmp_path / "registry")
    assert (second.name in reg.versions()) == (second.outcome == "promoted")
    assert (second.name in reg.rejected()) == (second.outcome == "rejected")
    text = t.metrics.text()
    assert all(s.removesuffix("_total") in text for s in SERIES)
    assert f'ktstream_finetune_runs_total{{outcome="{second.outcome}"}} ' in text
    assert 'ktstream_registry_model_info{version="' in text
    restarted = trainer(tmp_path)
    assert restarted.last_cutoff == second.cutoff_ms and restarted.run_once() is None, \
        "a restart resumes after the last window tried, promoted or rejected"


def test_a_restart_does_not_retry_a_rejected_window(tmp_path, stream):
    times = np.array([r["event_time"] for r in stream])
    split = int(np.quantile(times, 0.6))
    archive(tmp_path / "archive", [r for r in stream if r["event_time"] < split])
    strict = dict(promotion=fast_promotion(gate=GATE, bootstrap=50, margin=1.0))  # no candidate beats its parent by 1
    assert trainer(tmp_path, **strict).run_once().outcome == "promoted", "the first version has no parent to beat"
    archive(tmp_path / "archive", [r for r in stream if r["event_time"] >= split], first_offset=len(times))
    rejected = trainer(tmp_path, **strict).run_once()
    assert rejected.outcome == "rejected"
    restarted = trainer(tmp_path, **strict)
    assert restarted.last_cutoff == rejected.cutoff_ms and restarted.run_once() is None


def test_event_count_trigger(tmp_path, stream):
    archive(tmp_path / "archive", stream)
    t = trainer(tmp_path, every_ms=None, every_events=100)
    assert t.run_once() is not None and t.next_cutoff() is None
    end = max(r["event_time"] for r in stream)

    def later(start, n):  # n events after everything archived so far, so the cutoff moves too
        return [{**r, "event_id": f"x{start + i}", "event_time": end + 60_000 * (start + i + 1)}
                for i, r in enumerate(stream[start : start + n])]

    archive(tmp_path / "archive", later(0, 60), first_offset=len(stream))
    assert t.next_cutoff() is None, "60 events < every_events"
    archive(tmp_path / "archive", later(60, 60), first_offset=len(stream) + 60)
    assert t.next_cutoff() == end + 60_000 * 120 - 2 * DAY_MS


def test_failed_cycle_is_counted(tmp_path, stream, monkeypatch):
    archive(tmp_path / "archive", stream)
    t = trainer(tmp_path, metrics=FinetuneMetrics())
    monkeypatch.setattr("ktstream.finetune.scheduler.run_cycle", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        t.run_once()
    assert 'ktstream_finetune_runs_total{outcome="failed"} 1.0' in t.metrics.text() and t.run_once() is None


def test_cli_runs_one_cycle_from_a_config_file(tmp_path, stream, capsys):
    archive(tmp_path / "archive", stream)
    cfg = {"trainer": {"archive": str(tmp_path / "archive"), "registry": str(tmp_path / "registry"),
                       "model_kwargs": TINY_DKT, "horizon_days": 1, "every_days": 2, "metrics_port": None,
                       "finetune": {"epochs": 1, "segment": 50, "progress": False},
                       "promotion": {"bootstrap": 50}, "gate": {"checks": list(GATE.checks), "n_learners": 4}},
           "kafka": {"bootstrap_servers": "ignored:9092"}}
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["trainer", "--config", str(path), "--once"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "promoted" and out["name"] == "v000001"
    assert ModelRegistry(tmp_path / "registry").latest() == "v000001"


def test_the_archive_scan_is_sized_from_the_trainer_settings(tmp_path, stream, monkeypatch):
    """`trainer.scan` (DuckDB's memory limit, threads, rows sorted at once) reaches the archive read; a
    field ScanConfig does not have, or a limit it cannot size its sort groups by, is a ConfigError."""
    import ktstream.finetune.scheduler as scheduler
    from ktstream.cli.trainer import build
    from ktstream.exceptions import ConfigError

    archive(tmp_path / "archive", stream)
    settings = TrainerSettings(archive=str(tmp_path / "archive"), registry=str(tmp_path / "registry"),
                               model_kwargs=TINY_DKT, horizon_days=1, every_days=2, metrics_port=None,
                               finetune={"epochs": 1, "segment": 50, "progress": False},
                               promotion={"bootstrap": 50}, gate={"checks": list(GATE.checks), "n_learners": 4},
                               scan={"memory_limit": "256MB", "threads": 1, "sort_rows": 500})
    seen = []
    real = scheduler.build_windows_from_archive
    monkeypatch.setattr(scheduler, "build_windows_from_archive", lambda *a, cfg=None, **k: seen.append(cfg)
                        or real(*a, cfg=cfg, **k))
    assert build(settings).run_once().outcome == "promoted"
    assert seen == [settings.scan_config()] and seen[0].sort_rows == 500 and seen[0].memory_limit == "256MB"
    for bad in ({"memory_limt": "1GB"}, {"memory_limit": "80%"}, {"threads": 0}):
        with pytest.raises(ConfigError, match="trainer.scan"):
            TrainerSettings(archive="a", registry="r", scan=bad).scan_config()


def test_settings_need_a_trigger():
    with pytest.raises(ValueError, match="every_days or every_events"):
        TrainerSettings(archive="a", registry="r", every_days=None)


def test_run_loop_keeps_going_after_a_failed_cycle(tmp_path, stream, monkeypatch):
    archive(tmp_path / "archive", stream)
    t = trainer(tmp_path)
    calls = iter([False, False, True])  # one pass of the loop, then stop
    monkeypatch.setattr("ktstream.finetune.scheduler.run_cycle", lambda *a, **k: 1 / 0)
    t.run(poll_s=0.01, should_stop=lambda: next(calls))  # the failure is logged, not raised
    assert 'ktstream_finetune_runs_total{outcome="failed"} 1.0' in t.metrics.text()
