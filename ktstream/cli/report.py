"""`ktstream report`: evaluation results as one self-contained HTML page with plots.

    ktstream report runs/dkt/results.json runs/sakt/results.json -o report.html \
        --checkpoint runs/dkt/ckpt --gate runs/dkt/gate.json

The first results.json is the subject; the others join the comparison table.
Per-prediction figures need the subject's predictions: ``--predictions FILE``,
a predictions.parquet beside its results.json, or ``--checkpoint`` (the model
``ktstream evaluate -o DIR`` saved in DIR/ckpt) with the test events
(``--events``; by default the test.parquet beside the results.json, else, for the
benchmark protocol on a named data set, that data set's own test split).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("report", help="HTML report (plots, comparison, leakage gate) of evaluation results",
                       description=__doc__.split("\n")[0].split(": ", 1)[1])
    p.add_argument("results", nargs="+", type=Path, help="results.json of ktstream evaluate (first = subject)")
    p.add_argument("-o", "--out", type=Path, default=Path("report.html"), metavar="FILE", help="HTML file to write")
    p.add_argument("--label", action="append", default=[], help="a name per results file, in order")
    p.add_argument("--checkpoint", type=Path, metavar="DIR",
                   help="model to load: the subject's (ktstream evaluate -o DIR wrote it to DIR/ckpt)")
    p.add_argument("--events", type=Path, metavar="FILE",
                   help="the subject's test events (.jsonl / .parquet; default: test.parquet beside the results.json)")
    p.add_argument("--predictions", type=Path, help="per-prediction Parquet (default: beside the results.json)")
    p.add_argument("--save-predictions", type=Path, help="write the recomputed predictions here (Parquet)")
    p.add_argument("--gate", action="append", type=Path, default=[], help="leakage-gate report JSON (repeatable)")
    p.add_argument("--title", help="page title")
    p.set_defaults(func=run)


def _test_events(args, subject: dict) -> list[dict] | None:
    beside = args.results[0].parent / "test.parquet"
    if args.events or beside.is_file():
        from ktstream.data.eventlog import read_events

        return read_events(args.events or beside)
    if subject.get("protocol") == "benchmark" and subject.get("dataset"):
        from connectors.datasets import DATASET_FORMATS, options_of
        from ktstream.cli.sources import load_splits, resolve

        if subject["dataset"] not in DATASET_FORMATS:
            return None
        src = resolve(argparse.Namespace(dataset=subject["dataset"]))
        # "as given" means repeated rows were kept only where the format can merge them at all
        keep = "keep_repeated_rows" in options_of(src.format) and subject.get("rows") == "as given"
        return load_splits(src, subject.get("fold", 1), keep)[2]
    return None


def _concept_names(subject: dict) -> dict[str, str]:
    """The subject data set's own concept names (its side files under the data root), {} if none."""
    from connectors.datasets import data_root
    from connectors.datasets.concept_maps import load_concept_names

    folder = data_root() / str(subject.get("dataset") or "")
    return load_concept_names(folder) if subject.get("dataset") and folder.is_dir() else {}


def run(args: argparse.Namespace) -> int:
    from ktstream.cli.main import UsageError
    from ktstream.cli.options import existing

    for path in (*args.results, args.checkpoint, args.events, args.predictions, *args.gate):
        existing(path, "input")
    if args.label and len(args.label) != len(args.results):
        raise UsageError(f"give one --label per results file ({len(args.results)}), got {len(args.label)}")
    import torch

    from ktstream.reports import Predictions, ReportInputs, build_report, recompute

    torch.set_num_threads(1)
    results = [json.loads(p.read_text(encoding="utf-8")) for p in args.results]
    subject = results[0]
    model = records = predictions = None
    beside = args.results[0].parent / "predictions.parquet"
    if args.checkpoint:
        from ktstream.models.checkpoint import load_checkpoint

        net, items, concepts, version = load_checkpoint(args.checkpoint)
        records = _test_events(args, subject)
        if records is None:
            raise UsageError("--checkpoint needs --events (the test events) for this results file")
        model = (net, items, concepts)
    if args.predictions or (beside.is_file() and not args.checkpoint):
        predictions = Predictions.load(args.predictions or beside)
    elif model is not None:
        predictions = recompute(net, items, concepts, records)
        start = subject.get("counts", {}).get("test_from_ms")
        if subject.get("protocol") == "prequential_time" and start is not None:
            predictions = predictions.select(predictions.times * 1000.0 >= start)
        if args.save_predictions:
            predictions.save(args.save_predictions)
    gates = [json.loads(g.read_text(encoding="utf-8")) for g in args.gate]
    html = build_report(ReportInputs(results, args.label, predictions, model, records, gates, args.title,
                                     concept_names=_concept_names(subject)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(html, encoding="utf-8")
    print(f"wrote {args.out} ({len(html) / 1e6:.1f} MB; {len(predictions) if predictions else 0} predictions)")
    return 0
