"""Write deploy/grafana/dashboards/ktstream.json, the provisioned Grafana dashboard.

The dashboard is generated so that each panel's query sits next to a sentence
on how to read it; edit the PANELS below and run

    python deploy/grafana/build_dashboard.py

tests/deploy checks that the JSON file equals this script's output and that
every metric a panel names is exported by ktstream.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "ktstream.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
ENGINE = 'job="$job", instance=~"$instance"'
TRAINER = 'job="$trainer_job"'
ARCHIVE = 'job="$archive_job"'

# (row title, [(panel title, kind, unit, [(legend, expr)], description)])
ROWS = [
    ("Throughput and lag", [
        ("Events in / predictions out", "timeseries", "ops", [
            ("events in", f"sum(rate(ktstream_events_consumed_total{{{ENGINE}}}[$__rate_interval]))"),
            ("predictions out", f"sum(rate(ktstream_predictions_produced_total{{{ENGINE}}}[$__rate_interval]))"),
            ("dead-lettered", f"sum(rate(ktstream_dead_letters_total{{{ENGINE}}}[$__rate_interval]))")],
         "Records polled per second and predictions flushed per second. Out below in for long means records "
         "are dead-lettered or prediction requests lack a learner history; see the dead-letter row."),
        ("Consumer lag per partition", "timeseries", "short", [
            ("{{topic}}[{{partition}}]", f"max by (topic, partition) (ktstream_consumer_lag_records{{{ENGINE}}})")],
         "Records behind the fetcher's high-watermark, per input partition. Flat and small is healthy; a line "
         "that keeps rising means that partition's owner cannot keep up (alert KTStreamConsumerLagGrowing)."),
        ("Micro-batch size (records)", "timeseries", "short", [
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(ktstream_batch_size_events_bucket{{{ENGINE}}}[$__rate_interval])))"),
            ("p99", f"histogram_quantile(0.99, sum by (le) (rate(ktstream_batch_size_events_bucket{{{ENGINE}}}[$__rate_interval])))")],
         "Records per poll. Batches at engine.max_batch mean the engine is catching up; small batches mean it is idle-fast."),
    ]),
    ("Latency", [
        ("End-to-end latency (event time to prediction)", "timeseries", "s", [
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(ktstream_end_to_end_latency_seconds_bucket{{{ENGINE}}}[$__rate_interval])))"),
            ("p99", f"histogram_quantile(0.99, sum by (le) (rate(ktstream_end_to_end_latency_seconds_bucket{{{ENGINE}}}[$__rate_interval])))")],
         "From the learner's action (event_time) to the prediction produced: includes producer delay, broker, lag "
         "and clock skew. Interpolated within histogram buckets, so read it to the nearest bucket."),
        ("Processing latency (poll to flushed)", "timeseries", "s", [
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(ktstream_processing_latency_seconds_bucket{{{ENGINE}}}[$__rate_interval])))"),
            ("p99", f"histogram_quantile(0.99, sum by (le) (rate(ktstream_processing_latency_seconds_bucket{{{ENGINE}}}[$__rate_interval])))")],
         "The engine's own share: from poll return to the sink's acknowledgement, per event."),
        ("Learners per model call (wave)", "timeseries", "short", [
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(ktstream_wave_size_learners_bucket{{{ENGINE}}}[$__rate_interval])))")],
         "Learners predicted together in one batched model call; larger waves use the CPU better."),
        ("Engine loop time by phase", "timeseries", "percentunit", [
            ("{{phase}}", f"sum by (phase) (rate(ktstream_loop_seconds_total{{{ENGINE}}}[$__rate_interval]))")],
         "Share of the loop's wall time per phase (summed over instances: 1 = one loop busy all the time). "
         "poll near the whole: idle, waiting for records; process: the model and validation; flush and "
         "commit: waiting for the broker; gc: the engine's garbage collections between micro-batches. "
         "A loop with little poll time left is near its capacity."),
    ]),
    ("Dead letters and late events", [
        ("Dead letters by reason", "timeseries", "ops", [
            ("{{reason}}", f"sum by (reason) (rate(ktstream_dead_letters_total{{{ENGINE}}}[$__rate_interval]))")],
         "invalid_json / schema / oversized / key_mismatch: a producer problem; late: an event older than the "
         "learner's last applied one (engine.late_policy). Each dead letter keeps the original bytes."),
        ("Late events by action", "timeseries", "ops", [
            ("{{action}}", f"sum by (action) (rate(ktstream_late_events_total{{{ENGINE}}}[$__rate_interval]))")],
         "Late events applied (late_policy apply, predictions flagged late) or dead-lettered."),
        ("Rolled-back batches and duplicates", "timeseries", "short", [
            ("failed at {{stage}}", f"sum by (stage) (increase(ktstream_batch_failures_total{{{ENGINE}}}[$__rate_interval]))"),
            ("duplicates skipped", f"sum(increase(ktstream_duplicate_events_total{{{ENGINE}}}[$__rate_interval]))")],
         "A failed sink flush or commit rolls the batch back; redelivered records are skipped by source offset."),
    ]),
    ("Learner state", [
        ("Learners cached", "timeseries", "short", [
            ("{{instance}}", f"sum by (instance) (ktstream_learners_cached{{{ENGINE}}})")],
         "Learner states in each instance's hot cache."),
        ("State bytes", "timeseries", "bytes", [
            ("{{instance}}", f"sum by (instance) (ktstream_state_cache_bytes{{{ENGINE}}})")],
         "Bytes of learner state held; keep it below engine.cache_max_bytes, which bounds it."),
        ("Evictions and rebalances", "timeseries", "short", [
            ("evictions", f"sum(increase(ktstream_state_cache_evictions_total{{{ENGINE}}}[$__rate_interval]))"),
            ("partitions {{kind}}", f"sum by (kind) (increase(ktstream_rebalances_total{{{ENGINE}}}[$__rate_interval]))")],
         "Any eviction loses a learner's state until the durable store lands: raise cache_max_bytes."),
    ]),
    ("Model quality (online, prequential)", [
        ("Model in service", "table", "none", [
            ("", f"max by (instance, name, version) (ktstream_model_info{{{ENGINE}}})")],
         "Family and version each instance serves (one row per instance)."),
        ("Rolling ROC AUC and log loss", "timeseries", "none", [
            ("AUC {{instance}}", f"ktstream_online_roc_auc{{{ENGINE}}}"),
            ("log loss {{instance}}", f"ktstream_online_log_loss{{{ENGINE}}}")],
         "Over the last metrics.quality_window outcomes, each predicted before its response was used. "
         "AUC 0.5 is chance; the standard error at 1,000 outcomes is about 0.015."),
        ("Calibration: observed vs predicted per bin (last hour)", "barchart", "percentunit", [
            ("observed share correct", f"sum by (bin) (increase(ktstream_calibration_correct_total{{{ENGINE}}}[1h])) / sum by (bin) (increase(ktstream_calibration_predictions_total{{{ENGINE}}}[1h]))"),
            ("mean predicted", f"sum by (bin) (increase(ktstream_calibration_probability_sum_total{{{ENGINE}}}[1h])) / sum by (bin) (increase(ktstream_calibration_predictions_total{{{ENGINE}}}[1h]))")],
         "For each P(correct) bin, the two bars should match; observed below predicted means over-confidence."),
        ("Drift alarms", "timeseries", "short", [
            ("{{instance}}", f"sum by (instance) (increase(ktstream_drift_alarms_total{{{ENGINE}}}[$__rate_interval]))")],
         "ADWIN alarms on |response - p_correct|: a significant change in the error level."),
    ]),
    ("Process (engine and trainer)", [
        ("Resident memory", "timeseries", "bytes", [
            ("engine {{instance}}", f"process_resident_memory_bytes{{{ENGINE}}}"),
            ("trainer {{instance}}", f"process_resident_memory_bytes{{{TRAINER}}}")],
         "Resident set size of each process (prometheus_client's process collector). The engine's grows with "
         "its learner states up to about engine.cache_max_bytes plus the model and the runtime; keep it well "
         "below the container's memory limit (docs/operations.md, Capacity planning)."),
        ("CPU", "timeseries", "percentunit", [
            ("engine {{instance}}", f"rate(process_cpu_seconds_total{{{ENGINE}}}[$__rate_interval])"),
            ("trainer {{instance}}", f"rate(process_cpu_seconds_total{{{TRAINER}}}[$__rate_interval])")],
         "CPU seconds per second of each process (1 = one core busy). An engine near its CPU limit with lag "
         "rising needs more instances or torch threads; compare with the loop-time panel."),
        ("Open file descriptors", "timeseries", "short", [
            ("open {{instance}}", f"process_open_fds{{{ENGINE}}}"),
            ("limit {{instance}}", f"process_max_fds{{{ENGINE}}}")],
         "Sockets, state store files and libraries held by each engine, against its limit. A count that keeps "
         "growing is a leak; near the limit, connections and store files start failing."),
    ]),
    ("Fine-tuning", [
        ("Cycles by outcome (24 h)", "timeseries", "short", [
            ("{{outcome}}", f"sum by (outcome) (increase(ktstream_finetune_runs_total{{{TRAINER}}}[1d]))")],
         "promoted: a new version; rejected: the candidate lost to the serving model or failed the leakage gate; "
         "failed: the cycle raised (see the trainer log)."),
        ("Candidate vs serving on the judge window", "timeseries", "none", [
            ("{{model}} {{metric}}", f"ktstream_finetune_window_metric{{{TRAINER}}}"),
            ("CI low (candidate - serving)", f"ktstream_finetune_ci_low{{{TRAINER}}}")],
         "The last cycle's metric on [C+H, C+2H) for both models; a candidate is promoted only when the CI low is above the margin."),
        ("Cycle duration p50", "timeseries", "s", [
            ("p50", f"histogram_quantile(0.5, sum by (le) (rate(ktstream_finetune_duration_seconds_bucket{{{TRAINER}}}[1d])))")],
         "Wall time from replay to decision."),
        ("Event archive (what fine-tuning reads)", "timeseries", "ops", [
            ("events archived", f"sum(rate(ktstream_archive_events_written_total{{{ARCHIVE}}}[$__rate_interval]))"),
            ("dead-lettered ({{reason}})",
             f"sum by (reason) (rate(ktstream_archive_dead_letters_total{{{ARCHIVE}}}[$__rate_interval]))"),
            ("buffered (records)", f"sum(ktstream_archive_records_buffered{{{ARCHIVE}}})")],
         "Events written to durable archive files per second (flushed every archive.flush_records or "
         "flush_seconds, so it comes in steps), records the archiver dead-lettered, and records polled but "
         "not yet durable. Archived events below the engine's intake for long means the archiver lags, and "
         "fine-tuning cycles (cut by event time) wait for it."),
        ("Latest promoted version", "table", "none", [
            ("", f"max by (version) (ktstream_registry_model_info{{{TRAINER}}})")],
         "The registry's newest version; engines swap to it between micro-batches."),
        ("Cutoff age and states rebuilt", "timeseries", "short", [
            ("cutoff age (days)", f"(time() - max(ktstream_finetune_cutoff_timestamp_seconds{{{TRAINER}}})) / 86400"),
            ("states rebuilt ({{mode}})",
             f"sum by (mode) (increase(ktstream_states_rebuilt_total{{{ENGINE}}}[$__rate_interval]))"),
            ("model swaps", f"sum(increase(ktstream_model_swaps_total{{{ENGINE}}}[$__rate_interval]))")],
         "How old the newest cycle's cutoff C is (event time); engines: model swaps and learner states rebuilt "
         "after one (lazy: on the learner's next event; background: between micro-batches)."),
    ]),
]


def panel(pid: int, title: str, kind: str, unit: str, targets, description: str, x: int, y: int) -> dict:
    p = {"id": pid, "type": kind, "title": title, "description": description, "datasource": DS,
         "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "options": {},
         "targets": [{"refId": chr(65 + i), "datasource": DS, "expr": expr, "legendFormat": legend,
                      **({"format": "table", "instant": True} if kind in ("table", "barchart") else {})}
                     for i, (legend, expr) in enumerate(targets)]}
    if kind == "barchart":
        p["transformations"] = [{"id": "joinByField", "options": {"byField": "bin", "mode": "outer"}}]
        p["options"] = {"xField": "bin", "orientation": "vertical"}
    if kind == "table":
        p["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}]
    return p


def variable(name: str, label: str, query: str, regex: bool = False) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DS, "query": query, "refresh": 2,
            "includeAll": regex, "multi": regex, "allValue": ".*" if regex else None,
            "current": {}, "hide": 0, "sort": 1}


def build() -> dict:
    panels, pid, y = [], 1, 0
    for row_title, row_panels in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, (title, kind, unit, targets, description) in enumerate(row_panels):
            panels.append(panel(pid, title, kind, unit, targets, description, (i % 3) * 8, y + (i // 3) * 8))
            pid += 1
        y += 8 * ((len(row_panels) + 2) // 3)
    datasource = {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                  "current": {"text": "Prometheus", "value": "prometheus"}, "hide": 0}
    return {
        "uid": "ktstream-overview", "title": "ktstream", "tags": ["ktstream", "kafka", "knowledge-tracing"],
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s", "timezone": "utc",
        "time": {"from": "now-6h", "to": "now"},
        "description": "ktstream engine and trainer: throughput, lag, latency, dead letters, state, online quality, fine-tuning.",
        "templating": {"list": [
            datasource,
            variable("job", "Engine job", "label_values(ktstream_events_consumed_total, job)"),
            variable("instance", "Instance", 'label_values(ktstream_events_consumed_total{job="$job"}, instance)', True),
            variable("trainer_job", "Trainer job", "label_values(ktstream_finetune_runs_total, job)"),
            variable("archive_job", "Archiver job", "label_values(ktstream_archive_events_written_total, job)"),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
