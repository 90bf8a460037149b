"""`ktstream evaluate`: benchmark protocol on a dataset's own splits, or the time-ordered
prequential protocol on a timestamped stream. Writes results.json and results.md."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ktstream.evaluation.protocols import benchmark, prequential_time
from ktstream.leakage.random_labels import coin_flip_labels
from ktstream.scoring.binary import format_table
from ktstream.training.trainer import TrainConfig

log = logging.getLogger("ktstream.evaluate")

TABLE_COLUMNS = ["dataset", "rows", "model", "labels", "test_auc", "accuracy", "log_loss", "rmse", "brier",
                 "best_epoch", "minutes", "cpu_minutes"]


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="train, select and test a model under a leak-free protocol")
    modes = p.add_subparsers(dest="protocol", required=True)
    b = modes.add_parser("benchmark", help="a dataset's own train/valid/test split files")
    b.add_argument("--dataset", required=True, help="folder name under the data root, e.g. dkvmn_assist2009_updated")
    b.add_argument("--fold", type=int, default=1, help="fold k: train{k}/valid{k} (+ test{k} for AKT folds)")
    b.add_argument("--refit", action="store_true",
                   help="after selection, retrain on train+valid with the selected epochs; test that model")
    b.add_argument("--keep-repeated-rows", action="store_true",
                   help="keep multi-skill problems as repeated rows (only to reproduce published numbers)")
    p_ = modes.add_parser("prequential", help="time-ordered: train before C1, select on [C1, C0), test after C0")
    p_.add_argument("--dataset", help="timestamped dataset folder (ednet_kt1_11users, cognitive_tutor_algebra_subset)")
    p_.add_argument("--events", help="or a canonical events file (.jsonl / .parquet)")
    p_.add_argument("--select-from", type=float, default=0.6, help="C1 as a quantile of event times")
    p_.add_argument("--test-from", type=float, default=0.8, help="C0 as a quantile of event times")
    for m in (b, p_):
        _common(m)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="dkt", help="model family (see ktstream.models.names())")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON",
                   help="model constructor argument, e.g. --model-arg hidden=200")
    p.add_argument("--random-labels", action="store_true", help="replace every response by a coin flip")
    p.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    p.add_argument("--batch-tokens", type=int, default=TrainConfig.batch_tokens,
                   help="positions per training batch, padding included (0: --batch-size learners per batch)")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--lr", type=float, default=TrainConfig.lr)
    p.add_argument("--patience", type=int, default=TrainConfig.patience)
    p.add_argument("--chunk", type=int, default=TrainConfig.chunk)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=None, help="folder for results.json and results.md")
    p.add_argument("--checkpoint", type=Path, default=None, help="also save the selected model here")
    p.set_defaults(func=run)


def _model_kwargs(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _held_out(learner_id: str, share: float = 0.1) -> bool:
    return int(hashlib.sha1(learner_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


def _split_paths(dataset: str, fold: int) -> tuple[Path | None, Path | None, Path | None]:
    """(train, valid, test) files of a dataset's fold (valid None: the dataset has no validation file)."""
    from connectors.datasets import split_files

    files = split_files(dataset)
    chosen = next((f for f in files.folds if f.k == fold), None)
    if chosen is None:
        return files.train, None, files.test
    return chosen.train, chosen.valid, chosen.test or files.test


def load_benchmark_splits(dataset: str, fold: int, keep_repeated_rows: bool) -> tuple[list, list, list, str]:
    """(train, valid, test) records from the dataset's own files, and a label of the rows policy."""
    from connectors.datasets import DATASET_FORMATS, iter_events, options_of

    fmt = DATASET_FORMATS[dataset]
    opts = {"keep_repeated_rows": True} if keep_repeated_rows else {}
    if keep_repeated_rows and "keep_repeated_rows" not in options_of(fmt):
        raise SystemExit(f"format {fmt!r} has no repeated-row merging; drop --keep-repeated-rows")
    train_f, valid_f, test_f = _split_paths(dataset, fold)
    if train_f is None or test_f is None:
        raise SystemExit(f"dataset {dataset!r} has no train/test split files for fold {fold}")
    read = lambda path: list(iter_events(fmt, path, **opts))  # noqa: E731
    train, test = read(train_f), read(test_f)
    if valid_f is not None:
        valid = read(valid_f)
    else:  # no validation file: hold out 10% of the training learners, by id hash
        valid = [r for r in train if _held_out(r["learner_id"])]
        train = [r for r in train if not _held_out(r["learner_id"])]
    rows = "merged" if "keep_repeated_rows" in options_of(fmt) and not keep_repeated_rows else "as given"
    return train, valid, test, rows


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
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, batch_tokens=args.batch_tokens, lr=args.lr,
                      patience=args.patience, chunk=args.chunk, seed=args.seed, device=args.device)
    kwargs = _model_kwargs(args.model_arg)
    started, cpu_started = time.time(), time.process_time()
    if args.protocol == "benchmark":
        train, valid, test, rows = load_benchmark_splits(args.dataset, args.fold, args.keep_repeated_rows)
        if args.random_labels:
            train, valid, test = (coin_flip_labels(r, args.seed + i) for i, r in enumerate((train, valid, test)))
        artifacts: dict = {}
        result = benchmark(args.model, train, valid, test, cfg, kwargs, artifacts, refit=args.refit)
        if args.checkpoint:
            from ktstream.models.checkpoint import save_checkpoint

            save_checkpoint(args.checkpoint, artifacts["model"], artifacts["items"], artifacts["concepts"],
                            f"{args.model}-{args.dataset}-fold{args.fold}")
        result.update(dataset=args.dataset, fold=args.fold, rows=rows,
                      repeated_answers=repeated_answers(test, _split_paths(args.dataset, args.fold),
                                                       train + valid + test))
    else:
        records = _stream(args)
        if args.random_labels:
            records = coin_flip_labels(records, args.seed)
        times = np.array([r["event_time"] for r in records if r.get("event_time") is not None])
        if len(times) == 0:
            raise SystemExit("no event times: the prequential protocol needs a timestamped stream")
        c1, c0 = (int(np.quantile(times, q)) for q in (args.select_from, args.test_from))
        result = prequential_time(args.model, records, c1, c0, cfg, kwargs)
        test_from = [r for r in records if r.get("event_time") is not None and r["event_time"] >= c0]
        result.update(dataset=args.dataset or str(args.events), rows="as given",
                      repeated_answers=repeated_answers(test_from, all_records=records))
    # CPU minutes: the run's own compute, comparable across machines that are busy with other work
    result.update(random_labels=args.random_labels, minutes=round((time.time() - started) / 60, 2),
                  cpu_minutes=round((time.process_time() - cpu_started) / 60, 2), threads=torch.get_num_threads())
    row = table_row(result)
    text = format_table([row], TABLE_COLUMNS)
    warning = result["repeated_answers"]["warning"]
    if warning:
        text += f"\n\nWARNING: {warning}"
        log.warning(warning)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2, default=float))
        (args.out / "results.md").write_text(text + "\n")
    return 0


def _stream(args) -> list[dict]:
    if args.events:
        from ktstream.data.eventlog import read_events

        return read_events(args.events)
    from connectors.datasets import DATASET_FORMATS, dataset_dir, iter_events

    fmt, folder = DATASET_FORMATS[args.dataset], dataset_dir(args.dataset)
    return list(iter_events(fmt, folder if fmt == "ednet-kt1" else sorted(folder.glob("*.csv"))))


def table_row(result: dict) -> dict:
    t = result["test"]
    return {"dataset": result.get("dataset"), "rows": result.get("rows"), "model": result["model"],
            "labels": "coin flips" if result.get("random_labels") else "real", "test_auc": t["auc"],
            "accuracy": t["accuracy"], "log_loss": t["log_loss"], "rmse": t["rmse"], "brier": t["brier"],
            "best_epoch": result["fit"]["best_epoch"], "minutes": result.get("minutes"),
            "cpu_minutes": result.get("cpu_minutes")}
