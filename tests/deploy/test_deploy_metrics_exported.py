"""Every metric the dashboard and the alert rules query is exported by ktstream (live scrape).

Names are matched against sample names, so a histogram must be queried as
``_bucket`` / ``_sum`` / ``_count`` and a counter with its ``_total``; label
matchers (``outcome="failed"``) must name labels and values the series carry.
"""

from __future__ import annotations

import json
import urllib.error

import pytest
from tests.deploy.deploy_support import DEPLOY, MATCHER, METRIC, SELECTOR, load_yaml_docs

PROMETHEUS_LABELS = {"job", "instance"}  # added by the scrape, not by ktstream


def dashboard_exprs() -> list[str]:
    board = json.loads((DEPLOY / "grafana" / "dashboards" / "ktstream.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in board["templating"]["list"] if v.get("type") == "query"]
    return exprs


def rule_exprs() -> list[str]:
    (doc,) = load_yaml_docs(DEPLOY / "prometheus" / "rules.yml")
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def exported(live_series) -> dict[str, list[dict[str, str]]]:
    merged: dict[str, list[dict[str, str]]] = {}
    for service in ("engine", "trainer", "archive"):  # process_* appear in all three: keep every label set
        for name, labels in live_series[service].items():
            merged.setdefault(name, []).extend(labels)
    return merged


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_every_queried_metric_is_exported(live_series, source):
    exprs = dashboard_exprs() if source == "dashboard" else rule_exprs()
    names = {m for e in exprs for m in METRIC.findall(e)}
    assert len(names) >= 10, f"expected the {source} to query many ktstream series, found {sorted(names)}"
    samples = exported(live_series)
    missing = sorted(n for n in names if n not in samples)
    assert not missing, (f"the {source} queries series that ktstream does not export: {missing}; "
                         f"exported: {sorted(samples)}")


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_label_matchers_name_real_labels_and_values(live_series, source):
    exprs = dashboard_exprs() if source == "dashboard" else rule_exprs()
    samples = exported(live_series)
    checked = 0
    for expr in exprs:
        for name, body in SELECTOR.findall(expr):
            label_sets = samples.get(name, [])
            for label, op, value in MATCHER.findall(body):
                if label in PROMETHEUS_LABELS:
                    continue
                seen = {ls.get(label) for ls in label_sets}
                assert seen != {None}, f"{name} has no label {label!r} (in {expr!r})"
                if op == "=":
                    assert value in seen, f"{name}{{{label}={value!r}}} never occurs; values seen: {sorted(seen)}"
                checked += 1
    assert source == "dashboard" or checked > 0, "the rules select by at least one ktstream label"


def test_grouping_labels_exist(live_series):
    """``by (reason)``, ``by (topic, partition)``, ... name labels of the series they aggregate."""
    import re

    samples = exported(live_series)
    by = re.compile(r"by \(([^)]*)\) \(\s*(?:\w+\()?(ktstream_[a-z0-9_]+)")
    found = 0
    for expr in dashboard_exprs() + rule_exprs():
        for labels, name in by.findall(expr):
            for label in (x.strip() for x in labels.split(",")):
                if label in PROMETHEUS_LABELS or label == "le":
                    continue
                assert any(label in ls for ls in samples[name]), f"{name} has no label {label!r} to group by"
                found += 1
    assert found >= 5


def test_health_endpoints_answer_for_the_probes(live_series):
    """The Kubernetes probes and the compose healthcheck use these paths."""
    assert live_series["health"] == {"/healthz": 200, "/readyz": 200}


def test_engine_series_list_is_exported(live_series):
    """ktstream.engine.metrics.SERIES (the documented list) appears in the live scrape, under some sample name."""
    from ktstream.engine.metrics import SERIES
    from ktstream.finetune.metrics import SERIES as TRAINER_SERIES

    def present(name: str, samples) -> bool:
        return any(s == name or s.startswith(name + "_") or s == name + "_total" for s in samples)

    assert all(present(n, live_series["engine"]) for n in SERIES), sorted(live_series["engine"])
    assert all(present(n, live_series["trainer"]) for n in TRAINER_SERIES), sorted(live_series["trainer"])


@pytest.mark.parametrize("service", ["engine", "trainer", "archive"])
def test_standard_process_series_are_exported_and_no_created_series(live_series, service):
    from ktstream.engine.metrics import PROCESS_SERIES

    samples = live_series[service]
    missing = [n for n in PROCESS_SERIES if n not in samples]
    assert not missing, f"the {service} exports no {missing}"
    created = sorted(n for n in samples if n.endswith("_created"))
    assert not created, f"the {service} writes _created series: {created}"


def test_the_trainer_answers_its_probes(live_series):
    assert live_series["trainer_health"] == {"/healthz": 200, "/readyz": 200}


def test_metrics_negotiate_openmetrics_and_fall_back_to_prometheus_text():
    """A scraper asking for OpenMetrics gets it (counters as families without _total, # EOF at the end);
    any other Accept header gets the Prometheus text format."""
    import urllib.request

    from ktstream.engine.metrics import EngineMetrics
    from ktstream.engine.server import MetricsServer

    metrics = EngineMetrics()
    metrics.consumed.inc(3)
    with MetricsServer(metrics.registry, lambda: True, lambda: True, port=0) as srv:
        def get(accept: str | None) -> tuple[str, str]:
            req = urllib.request.Request(f"{srv.url}/metrics", headers={"Accept": accept} if accept else {})
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.headers["Content-Type"], r.read().decode()

        ctype, text = get("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
        assert ctype.startswith("application/openmetrics-text") and text.endswith("# EOF\n")
        assert "# TYPE ktstream_events_consumed counter" in text and "ktstream_events_consumed_total 3.0" in text
        assert "_created" not in text
        for accept in (None, "text/plain", "*/*"):
            ctype, text = get(accept)
            assert ctype.startswith("text/plain; version=0.0.4") and "# EOF" not in text
            assert "ktstream_events_consumed_total 3.0" in text and "process_resident_memory_bytes" in text


def test_the_archiver_serves_metrics_and_probes(tmp_path):
    """`ktstream archive` answers on the engine's HTTP server: its own series, the process series, probes."""
    import json
    import urllib.request

    from connectors.archive import ArchiveSettings, ArchiveWriter, Archiver, serve_metrics
    from ktstream.core import Record
    from ktstream.data.simulate import simulate
    from ktstream.engine.records import MemorySink, MemorySource
    from tests.deploy.deploy_support import scrape

    events = simulate(n_learners=3, mean_length=5, seed=2)
    records = [Record("ev", 0, i, r["learner_id"].encode(), json.dumps(r).encode(), 0) for i, r in enumerate(events)]
    records.append(Record("ev", 0, len(records), b"u0", b'{"broken', 0))
    settings = ArchiveSettings(folder=str(tmp_path), metrics_port=0)
    archiver = Archiver(MemorySource(records), ArchiveWriter(tmp_path, flush_records=10_000), MemorySink(), settings)
    server = serve_metrics(archiver, settings)
    try:
        ready = lambda: urllib.request.urlopen(f"{server.url}/readyz", timeout=10).status  # noqa: E731
        try:
            ready()
            raise AssertionError("ready before any assignment")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503
        archiver.step(0.0, 1000)
        archiver.flush()
        assert ready() == 200
        assert urllib.request.urlopen(f"{server.url}/healthz", timeout=10).status == 200
        samples = scrape(f"{server.url}/metrics")
    finally:
        server.close()
    text = {name: labels for name, labels in samples.items()}
    assert "ktstream_archive_events_written_total" in text and "process_resident_memory_bytes" in text
    assert text["ktstream_archive_dead_letters_total"] == [{"reason": "invalid_json"}]
    import re

    prom = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    assert re.search(r"job_name: ktstream-archive\b", prom) and "archiver:9466" in prom
