"""The ``ktstream`` command line (ktstream.cli.main): one module per command, named after it.

`COMMANDS` is the list ``ktstream --help`` prints without importing any command's module (so it
takes as long as starting Python, not as long as importing torch); each module's ``register`` takes
its one-line help from here, so the two cannot differ.
"""

#: command -> its one-line help
COMMANDS: dict[str, str] = {
    "archive": "archive the events topic as Parquet partitioned by event date",
    "check-leakage": "run the leakage gate (perturbation, random labels, protocol, data)",
    "compare": "run models on data sets under one budget: table, plan and HTML section",
    "config-reference": "generate docs/configuration.md (and docs/schemas/*.json)",
    "convert": "convert a public KT data set to the canonical event log (JSONL or Parquet)",
    "demo": "embedded broker + quick model + engine + replay, with a live summary",
    "evaluate": "train, select and test a model under a leak-free protocol",
    "explain": "heatmap PNG of an attention model's weights over one learner's history",
    "replay": "publish a canonical event log to the events topic, in order, at a rate",
    "report": "HTML report (plots, comparison, leakage gate) of evaluation results",
    "schema": "print the JSON Schemas of events, predictions and dead letters",
    "serve": "run the streaming engine (Kafka in, predictions out, /metrics, /healthz)",
    "study": "recurrent vs attention models: synthetic dependencies with a ground truth, HTML report",
    "state": "inspect, export or import the engine's local learner-state store",
    "train": "fit a model on a data set or event files and save a checkpoint",
    "trainer": "fine-tune periodically on the event archive; promote through the gate",
}
