"""Alert rules load (promtool when installed, a schema check always) and behave; the dashboard is current.

CI machines start clean: promtool comes from Debian's ``prometheus`` package
(``apt-get install prometheus``), which .ci/run does not install, so the
promtool tests skip with that message when it is absent. The YAML schema
check and the metric checks of test_deploy_metrics_exported.py always run.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess

import pytest
from tests.deploy.deploy_support import DEPLOY, load_yaml_docs

PROM = DEPLOY / "prometheus"
DURATION = re.compile(r"^\d+[smhdwy]$")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")


def test_rules_schema():
    (doc,) = load_yaml_docs(PROM / "rules.yml")
    names = []
    for group in doc["groups"]:
        assert set(group) == {"name", "rules"} and group["rules"], group.get("name")
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["alert"] and rule["expr"].strip(), rule
            assert "for" not in rule or DURATION.match(rule["for"]), rule["for"]
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            names.append(rule["alert"])
    assert len(names) == len(set(names)), "alert names are unique"
    for needed in ("KTStreamConsumerLagGrowing", "KTStreamDeadLetterRate", "KTStreamEndToEndLatencyP99High",
                   "KTStreamOnlineAUCDrop", "KTStreamDriftAlarms", "KTStreamFinetuneFailed"):
        assert needed in names


def test_every_rule_is_explained_by_a_comment():
    """Thresholds a person can reason about: a comment directly above every rule."""
    lines = (PROM / "rules.yml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("- alert:"):
            assert lines[i - 1].strip().startswith("#"), \
                f"rule at line {i + 1} ({line.strip()}) has no comment explaining its threshold"


def test_restore_rule_waits_for_its_metric():
    text = (PROM / "rules.yml").read_text()
    assert "# - alert: KTStreamRestoreSlow" in text and "ktstream_state_restore_seconds_bucket" in text
    from prometheus_client import CollectorRegistry, generate_latest

    from ktstream.state.metrics import StateMetrics  # the series the rule reads exists

    registry = CollectorRegistry()
    StateMetrics(registry)
    assert "ktstream_state_restore_seconds_bucket" in generate_latest(registry).decode()


@needs_promtool
def test_promtool_check_rules_and_config():
    for args in (["check", "rules", str(PROM / "rules.yml")], ["check", "config", str(PROM / "prometheus.yml")]):
        out = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_promtool_rule_unit_tests():
    """deploy/prometheus/rules_test.yml: made-up series that must (and must not) fire alerts."""
    out = subprocess.run([PROMTOOL, "test", "rules", str(PROM / "rules_test.yml")], capture_output=True,
                         text=True, timeout=120, cwd=PROM)
    assert out.returncode == 0, out.stdout + out.stderr


def _build_dashboard_module():
    spec = importlib.util.spec_from_file_location("build_dashboard", DEPLOY / "grafana" / "build_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dashboard_json_is_current():
    """The provisioned JSON equals the generator's output (run build_dashboard.py after editing it)."""
    module = _build_dashboard_module()
    assert (DEPLOY / "grafana" / "dashboards" / "ktstream.json").read_text() == module.render(), \
        "dashboards/ktstream.json is stale: run python deploy/grafana/build_dashboard.py"


def test_dashboard_covers_what_operators_need():
    board = json.loads((DEPLOY / "grafana" / "dashboards" / "ktstream.json").read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    for series in ("ktstream_events_consumed_total", "ktstream_predictions_produced_total",
                   "ktstream_consumer_lag_records", "ktstream_dead_letters_total", "ktstream_learners_cached",
                   "ktstream_state_cache_bytes", "ktstream_model_info", "ktstream_online_roc_auc",
                   "ktstream_calibration_correct_total", "ktstream_drift_alarms_total", "ktstream_finetune_runs_total"):
        assert series in exprs, f"no panel shows {series}"
    assert "histogram_quantile(0.99" in exprs and "histogram_quantile(0.5" in exprs
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels:
        assert p["description"] and p["datasource"]["uid"] == "${datasource}", p["title"]
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
