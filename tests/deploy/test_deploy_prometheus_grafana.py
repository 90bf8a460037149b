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
            assert rule["annotations"]["runbook_url"], rule["alert"]
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


def _alerts(doc: dict) -> list[dict]:
    return [r for g in doc["groups"] for r in g["rules"]]


def test_every_alert_links_its_runbook_section_in_operations_md():
    """runbook_url: docs/operations.md's section of that alert, which exists and names it."""
    ops = (DEPLOY.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", ops, re.M)}
    (doc,) = load_yaml_docs(PROM / "rules.yml")
    for rule in _alerts(doc):
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page.endswith("/docs/operations.md") and anchor == rule["alert"].lower(), url
        assert anchor in anchors, f"docs/operations.md has no section '### {rule['alert']}' for {url}"


def _build_prometheusrule_module():
    spec = importlib.util.spec_from_file_location("build_prometheusrule", PROM / "build_prometheusrule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prometheusrule_manifest_holds_exactly_the_rules_file():
    """deploy/kubernetes/prometheusrule.yaml (Prometheus Operator) = rules.yml's groups, regenerated."""
    module = _build_prometheusrule_module()
    path = DEPLOY / "kubernetes" / "prometheusrule.yaml"
    assert path.read_text(encoding="utf-8") == module.render(), \
        "prometheusrule.yaml is stale: run python deploy/prometheus/build_prometheusrule.py"
    (manifest,) = load_yaml_docs(path)
    (rules,) = load_yaml_docs(PROM / "rules.yml")
    assert manifest["kind"] == "PrometheusRule" and manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["spec"]["groups"] == rules["groups"]


@needs_promtool
def test_prometheusrule_groups_pass_promtool(tmp_path):
    (manifest,) = load_yaml_docs(DEPLOY / "kubernetes" / "prometheusrule.yaml")
    import yaml

    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": manifest["spec"]["groups"]}), encoding="utf-8")
    out = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_has_process_panels():
    """Memory, CPU and file descriptors of the processes, from the standard process_* series."""
    board = json.loads((DEPLOY / "grafana" / "dashboards" / "ktstream.json").read_text())
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p.get("targets", []))
    for series in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
                   "process_max_fds"):
        assert series in exprs, f"no panel shows {series}"
