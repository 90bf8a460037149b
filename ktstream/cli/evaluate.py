"""`ktstream evaluate`: benchmark protocol on a data set's own splits, or the time-ordered
prequential protocol on a timestamped stream.

The run folder (``-o/--out DIR``) gets everything ``ktstream report`` and ``ktstream check-leakage``
read: results.json and results.md, the tested model in ``DIR/ckpt`` (with the ``fit.json`` of its
selection), and the records it was trained, selected and tested on as ``DIR/{train,valid,test}.parquet``.

    ktstream evaluate benchmark --dataset dkvmn_statics2011 --model dkt -o runs/dkt
    ktstream evaluate benchmark --data my_folder --format dkvmn --model dkt -o runs/mine
    ktstream report runs/dkt/results.json --checkpoint runs/dkt/ckpt -o runs/dkt/report.html
    ktstream check-leakage --run runs/dkt
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

from ktstream.cli.main import UsageError
from ktstream.cli.options import (add_data, add_model, add_training, check_memory_limit, check_model, model_kwargs,
                                  set_threads, train_config)

log = logging.getLogger("ktstream.evaluate")

TABLE_COLUMNS = ["dataset", "rows", "model", "labels", "test_auc", "accuracy", "log_loss", "rmse", "brier",
                 "best_epoch", "minutes", "cpu_minutes"]


class _Moved(argparse.Action):
    """An option whose meaning moved: naming it is a usage error that says where to."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"evaluate {option_string} is gone: the run folder (-o/--out DIR) holds the tested model "
                         f"in DIR/ckpt; --checkpoint means a model to load, in every command")


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="train, select and test a model under a leak-free protocol",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    modes = p.add_subparsers(dest="protocol", required=True, metavar="PROTOCOL")
    b = modes.add_parser("benchmark", help="a data set's own train/valid/test split files")
    add_data(b)
    b.add_argument("--refit", action="store_true",
                   help="after selection, retrain on train+valid with the selected epochs; test that model")
    b.add_argument("--keep-repeated-rows", action="store_true",
                   help="keep multi-skill problems as repeated rows (only to reproduce published numbers)")
    p_ = modes.add_parser("prequential", help="time-ordered: train before C1, select on [C1, C0), test after C0")
    add_data(p_, events=True, fold=False)
    p_.add_argument("--select-from", type=float, default=0.6, help="C1 as a quantile of event times")
    p_.add_argument("--test-from", type=float, default=0.8, help="C0 as a quantile of event times")
    p_.add_argument("--memory-limit", metavar="SIZE", default="2GB",
                    help="Parquet event logs: memory for ordering the log by learner (DuckDB, spilling to a "
                         "temporary folder past it), e.g. 512MB (default 2GB)")
    p_.add_argument("--train-buffer-events", type=int, default=2_000_000, metavar="N",
                    help="Parquet event logs: training positions held at once; the training window is read "
                         "again from the log for each epoch, N positions at a time (default 2,000,000)")
    for m in (b, p_):
        _common(m)


def _common(p: argparse.ArgumentParser) -> None:
    add_model(p)
    p.add_argument("--random-labels", action="store_true", help="replace every response by a coin flip")
    add_training(p)
    p.add_argument("-o", "--out", type=Path, default=None, metavar="DIR",
                   help="run folder: results.json, results.md, ckpt/, train/valid/test.parquet")
    p.add_argument("--checkpoint", action=_Moved, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def repeated_answers(test_records: list[dict], files: tuple[Path | None, ...] = (),
                     all_records: list[dict] | None = None) -> dict[str, Any]:
    """How many test rows may repeat an answer (results.json's ``repeated_answers``), with a warning
    whenever the share passes the gate's bound or a file is a known copy with repeated answers. Co-tagged
    skills (data without problem ids) are learnt from ``all_records`` (default: the test rows)."""
    from connectors.datasets.fingerprints import known_repeated_answers
    from ktstream.data.histories import build_vocabularies, encode
    from ktstream.leakage import GateConfig, answer_repeat_warning

    known = sorted({why for f in files if f is not None and (why := known_repeated_answers(Path(f)))})
    everything = test_records if all_records is None else all_records
    items, concepts = build_vocabularies(everything)
    learn_from = None if all_records is None else encode(all_records, items, concepts)
    return answer_repeat_warning(encode(test_records, items, concepts), "test", known, GateConfig.max_repeated_share,
                                 learn_from)


def run(args: argparse.Namespace) -> int:
    from ktstream.cli.sources import check_timestamped, load_splits, load_stream, resolve

    kwargs = model_kwargs(args.model_arg)
    src = resolve(args)  # names, paths and formats first: nothing is read before they are known to be right
    if args.protocol == "prequential":
        check_timestamped(src)
        check_memory_limit(args.memory_limit)
        if args.train_buffer_events < 1:
            raise UsageError(f"--train-buffer-events must be positive, got {args.train_buffer_events}")
        if not 0 <= args.select_from < args.test_from <= 1:
            raise UsageError(f"need 0 <= --select-from < --test-from <= 1, got {args.select_from} and {args.test_from}")
    check_model(args.model, kwargs)
    set_threads(args)
    import numpy as np
    import torch

    from ktstream.evaluation.protocols import benchmark, prequential_time
    from ktstream.leakage.random_labels import coin_flip_labels

    cfg = train_config(args)
    started, cpu_started = time.time(), time.process_time()
    artifacts: dict = {}
    write_splits = None
    if args.protocol == "benchmark":
        from ktstream.cli.sources import split_paths

        train, valid, test, rows = load_splits(src, args.fold, args.keep_repeated_rows)
        if args.random_labels:
            train, valid, test = (coin_flip_labels(r, args.seed + i) for i, r in enumerate((train, valid, test)))
        result = benchmark(args.model, train, valid, test, cfg, kwargs, artifacts, refit=args.refit)
        result.update(dataset=src.label, format=src.format, fold=args.fold, rows=rows,
                      repeated_answers=repeated_answers(test, split_paths(src, args.fold), train + valid + test))
        version = f"{args.model}-{Path(src.label).name}-fold{args.fold}"
    elif _parquet_log(src):
        result, write_splits = _prequential_parquet(args, src, cfg, kwargs, artifacts)
        version = f"{args.model}-{Path(src.label).name}-prequential"
    else:
        records = load_stream(src)
        if args.random_labels:
            records = coin_flip_labels(records, args.seed)
        times = np.array([r["event_time"] for r in records if r.get("event_time") is not None])
        if len(times) == 0:
            raise UsageError(f"{src.label} has no event times: the prequential protocol needs a timestamped stream")
        c1, c0 = (int(np.quantile(times, q)) for q in (args.select_from, args.test_from))
        result = prequential_time(args.model, records, c1, c0, cfg, kwargs, artifacts=artifacts)
        timed = [r for r in records if r.get("event_time") is not None]
        train = [r for r in timed if r["event_time"] < c1]
        valid = [r for r in timed if c1 <= r["event_time"] < c0]
        test = [r for r in timed if r["event_time"] >= c0]
        result.update(dataset=src.label, format=src.format, rows="as given",
                      repeated_answers=repeated_answers(test, all_records=records))
        version = f"{args.model}-{Path(src.label).name}-prequential"
    # CPU minutes: the run's own compute, comparable across machines that are busy with other work
    result.update(random_labels=args.random_labels, minutes=round((time.time() - started) / 60, 2),
                  cpu_minutes=round((time.process_time() - cpu_started) / 60, 2), threads=torch.get_num_threads())
    row = table_row(result)
    from ktstream.scoring.binary import format_table

    text = format_table([row], TABLE_COLUMNS)
    warning = result["repeated_answers"]["warning"]
    if warning:
        text += f"\n\nWARNING: {warning}"
        log.warning(warning)
    print(text)
    if args.out:
        write_run(args.out, result, text, artifacts, version, write_splits or _record_splits(train, valid, test))
        print(f"wrote {args.out}: results.json, results.md, ckpt/, train/valid/test.parquet")
    return 0


def write_run(out: Path, result: dict, text: str, artifacts: dict, version: str, write_splits) -> None:
    """The run folder: results, the tested model with its fit.json (what selection read), and the split
    records (``write_splits(folder)`` writes train/valid/test.parquet)."""
    from ktstream.models.checkpoint import save_checkpoint

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2, default=float))
    (out / "results.md").write_text(text + "\n")
    ckpt = save_checkpoint(out / "ckpt", artifacts["model"].cpu(), artifacts["items"], artifacts["concepts"], version)
    (ckpt / "fit.json").write_text(json.dumps(result["fit"], indent=2, default=float))
    write_splits(out)


def _record_splits(*splits: list[dict]):
    def write(out: Path) -> None:
        from ktstream.data.eventlog import write_events

        for name, records in zip(("train", "valid", "test"), splits):
            write_events(records, out / f"{name}.parquet")
    return write


def _parquet_log(src) -> bool:
    """A canonical log in Parquet only: the columnar path reads it (no record per event)."""
    from connectors.datasets.splits import EVENTS, stream_inputs

    return src.format == EVENTS and all(p.suffix == ".parquet" for p in stream_inputs(src.path, EVENTS))


def _prequential_parquet(args: argparse.Namespace, src, cfg, kwargs: dict, artifacts: dict):
    """The prequential protocol on Parquet event logs in columns (``evaluation.parquet_log``): the same
    result and run folder as the record path, holding one training buffer and the histories of the
    learners with events at or after C1, not the log."""
    import tempfile

    from connectors.datasets.splits import EVENTS, stream_inputs
    from ktstream.data.columnar import ScanConfig
    from ktstream.data.histories import count_before, since
    from ktstream.evaluation.parquet_log import LogHistories, LogTrainingData, ParquetLog, recode, write_responses
    from ktstream.evaluation.protocols import prequential_split
    from ktstream.leakage import GateConfig, answer_repeat_warning
    from ktstream.leakage.expansion import cotagged_pairs
    from ktstream.leakage.random_labels import coin_flips_per_pass

    log = ParquetLog(stream_inputs(src.path, EVENTS), ScanConfig(memory_limit=args.memory_limit))
    n, undated = log.counts()
    if n == undated:
        raise UsageError(f"{src.label} has no event times: the prequential protocol needs a timestamped stream")
    if undated:
        raise UsageError(f"{src.label}: {undated} of {n} events have no event_time; the time-ordered protocol "
                         f"needs one on every event (use `evaluate benchmark` for order-only data)")
    c1, c0 = log.time_quantiles([args.select_from, args.test_from])
    every_vocab, train_vocab = log.vocabularies(), log.vocabularies(before_ms=c1)
    flips = coin_flips_per_pass(args.seed) if args.random_labels else None
    everything = LogHistories(log, every_vocab, relabel=flips)  # read again on each pass, never held
    later: list = []

    def keeping_later():  # one pass: every history for the co-tagged pairs, the learners active after C1 kept
        for h in everything:
            if count_before(h, c1) < len(h):
                later.append(h)
            yield h

    pairs = cotagged_pairs(keeping_later())
    repeats = answer_repeat_warning(since(later, c0), "test", [], GateConfig.max_repeated_share, cotagged=pairs)
    later = recode(later, every_vocab, train_vocab)  # the log's own codes are let go
    train = LogTrainingData(LogHistories(log, every_vocab, train_vocab, flips), c1, args.train_buffer_events)
    result = prequential_split(args.model, train, later, log.learners(), *train_vocab, c1, c0, cfg, kwargs,
                               artifacts=artifacts)
    result.update(dataset=src.label, format=src.format, rows="as given", repeated_answers=repeats)

    def write(out: Path) -> None:
        with tempfile.TemporaryDirectory(dir=out) as scratch:
            responses = None
            if flips is not None:
                responses = Path(scratch) / "coin-flips.parquet"
                write_responses(everything, responses)
            for name, lo, hi in (("train", None, c1), ("valid", c1, c0), ("test", c0, None)):
                log.write_split(out / f"{name}.parquet", lo, hi, responses)
    return result, write


def table_row(result: dict) -> dict:
    t = result["test"]
    return {"dataset": result.get("dataset"), "rows": result.get("rows"), "model": result["model"],
            "labels": "coin flips" if result.get("random_labels") else "real", "test_auc": t["auc"],
            "accuracy": t["accuracy"], "log_loss": t["log_loss"], "rmse": t["rmse"], "brier": t["brier"],
            "best_epoch": result["fit"]["best_epoch"], "minutes": result.get("minutes"),
            "cpu_minutes": result.get("cpu_minutes")}
