"""`ktstream train`: fit a model on canonical event files and save a checkpoint.

Vocabularies come from the training file only; early stopping reads the
validation file only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ktstream.cli.evaluate import _model_kwargs
from ktstream.data.eventlog import read_events
from ktstream.data.histories import build_vocabularies, encode
from ktstream.evaluation.protocols import n_categories_of
from ktstream.models import create
from ktstream.models.checkpoint import save_checkpoint
from ktstream.training.trainer import TrainConfig, fit


def register(sub) -> None:
    p = sub.add_parser("train", help="fit a model on event files and save a checkpoint")
    p.add_argument("--train", required=True, type=Path, help="training events (.jsonl / .parquet)")
    p.add_argument("--valid", required=True, type=Path, help="validation events, used for early stopping only")
    p.add_argument("--model", default="dkt")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON")
    p.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    p.add_argument("--batch-tokens", type=int, default=TrainConfig.batch_tokens,
                   help="positions per training batch, padding included (0: --batch-size learners per batch)")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--lr", type=float, default=TrainConfig.lr)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--version", default=None, help="version label stored in the checkpoint")
    p.add_argument("--out", required=True, type=Path, help="checkpoint folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    train_recs, valid_recs = read_events(args.train), read_events(args.valid)
    items, concepts = build_vocabularies(train_recs)
    torch.manual_seed(args.seed)
    model = create(args.model, n_items=len(items), n_concepts=len(concepts),
                   n_categories=n_categories_of(train_recs), **_model_kwargs(args.model_arg))
    cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, batch_tokens=args.batch_tokens, lr=args.lr,
                      seed=args.seed, device=args.device)
    result = fit(model, encode(train_recs, items, concepts), encode(valid_recs, items, concepts), cfg)
    save_checkpoint(args.out, model.cpu(), items, concepts, args.version or f"{args.model}-{args.train.stem}")
    (args.out / "fit.json").write_text(json.dumps(result.__dict__, indent=2, default=float))
    print(f"saved {args.out}: best epoch {result.best_epoch}, valid {result.selection_metric} {result.best_valid:.4f}")
    return 0
