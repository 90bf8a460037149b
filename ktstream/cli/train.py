"""`ktstream train`: fit a model and save it as a checkpoint folder (config.json, weights, fit.json).

The data is a pair of canonical event files (``--train FILE --valid FILE``) or a data set's split
files (``--dataset NAME`` / ``--data PATH [--format NAME]``, fold ``--fold``; its test file is not
read). Vocabularies come from the training records only; early stopping reads the validation records
only.

    ktstream train --train train.jsonl --valid valid.jsonl --model sakt -o ckpt/
    ktstream train --data my_folder --format dkvmn --model dkt --threads 1 -o ckpt/
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ktstream.cli.main import UsageError
from ktstream.cli.options import (add_data, add_model, add_training, check_model, existing, model_kwargs, set_threads,
                                  train_config)


def register(sub) -> None:
    p = sub.add_parser("train", help="fit a model on a data set or event files and save a checkpoint",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    g = add_data(p, required=False)
    g.add_argument("--train", type=Path, metavar="FILE", help="training events (.jsonl / .parquet); needs --valid")
    p.add_argument("--valid", type=Path, metavar="FILE",
                   help="with --train: validation events, for early stopping only")
    add_model(p)
    add_training(p)
    p.add_argument("--version", default=None, help="version label stored in the checkpoint (default: MODEL-DATA)")
    p.add_argument("-o", "--out", required=True, type=Path, metavar="DIR", help="checkpoint folder to write")
    p.set_defaults(func=run)


def _records(args: argparse.Namespace) -> tuple[list[dict], list[dict], str]:
    from ktstream.cli.sources import load_splits, resolve

    if args.train is not None:
        if args.valid is None:
            raise UsageError("--train needs --valid (the events early stopping reads)")
        from ktstream.data.eventlog import read_events

        return read_events(existing(args.train, "--train")), read_events(existing(args.valid, "--valid")), \
            args.train.stem
    if args.valid is not None:
        raise UsageError("--valid goes with --train FILE; with --dataset / --data the data set's own split is used")
    src = resolve(args)
    if src is None:
        raise UsageError("name the data: --train FILE --valid FILE, --dataset NAME or --data PATH")
    train, valid, _, _ = load_splits(src, args.fold)
    return train, valid, Path(src.label).name


def run(args: argparse.Namespace) -> int:
    kwargs = model_kwargs(args.model_arg)
    if args.train is None and args.valid is None:
        from ktstream.cli.sources import resolve

        resolve(args)  # names and paths checked before the model family is
    check_model(args.model, kwargs)
    set_threads(args)
    import torch

    from ktstream.data.histories import build_vocabularies, encode
    from ktstream.evaluation.protocols import n_categories_of
    from ktstream.models import create
    from ktstream.models.checkpoint import save_checkpoint
    from ktstream.training.trainer import fit

    train_recs, valid_recs, name = _records(args)
    items, concepts = build_vocabularies(train_recs)
    torch.manual_seed(args.seed)
    model = create(args.model, n_items=len(items), n_concepts=len(concepts),
                   n_categories=n_categories_of(train_recs), **kwargs)
    result = fit(model, encode(train_recs, items, concepts), encode(valid_recs, items, concepts), train_config(args))
    save_checkpoint(args.out, model.cpu(), items, concepts, args.version or f"{args.model}-{name}")
    (args.out / "fit.json").write_text(json.dumps(result.__dict__, indent=2, default=float))
    print(f"saved {args.out}: best epoch {result.best_epoch}, valid {result.selection_metric} {result.best_valid:.4f}")
    return 0
