"""`ktstream check-leakage`: run the leakage gate on a model and its train/valid/test event files.

The model is a saved checkpoint (``--checkpoint``, with the ``fit.json`` that
``ktstream train`` writes beside it, so the gate also checks what selection
read), or a fresh family (``--model``), optionally fitted first
(``--fit-epochs``). Vocabularies come from the checkpoint, else from the
training file only. Prints the report table; ``--json`` writes the report;
the exit status is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ktstream.leakage import ALL_CHECKS, GateConfig, GateData, run_gate


def register(sub) -> None:
    p = sub.add_parser("check-leakage", help="run the leakage gate (perturbation, random labels, protocol, data)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", type=Path, help="checkpoint folder (config.json, weights, fit.json)")
    which.add_argument("--model", help="model family to build fresh (see ktstream.models.names())")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON", help="constructor argument")
    p.add_argument("--train", required=True, type=Path, help="training events (.jsonl / .parquet)")
    p.add_argument("--valid", required=True, type=Path, help="validation events")
    p.add_argument("--test", required=True, type=Path, help="test events")
    p.add_argument("--split", choices=["learner", "time"], default="learner", help="how the files were split")
    p.add_argument("--fit-epochs", type=int, default=0, help="with --model: fit this many epochs first")
    p.add_argument("--checks", default=",".join(ALL_CHECKS), help="comma-separated checks to run")
    p.add_argument("--precision", choices=["fp64", "fp32"], default="fp64")
    p.add_argument("--random-label-epochs", type=int, default=GateConfig.random_label_epochs)
    p.add_argument("--learners", type=int, default=GateConfig.n_learners, help="learners sampled for model checks")
    p.add_argument("--probe-length", type=int, default=GateConfig.max_length,
                   help="positions per probe history (continued by other learners when shorter; raised to cross "
                        "a windowed model's receptive field three times)")
    p.add_argument("--path-chunk", type=int, default=GateConfig.path_chunk,
                   help="window of the trainer's paths in path_equivalence")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="where random-label training runs")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    p.set_defaults(func=run)


def _load(args: argparse.Namespace, train_recs: list[dict]):
    """(model, item vocabulary, concept vocabulary, FitResult or None)."""
    from ktstream.cli.evaluate import _model_kwargs
    from ktstream.data.histories import build_vocabularies
    from ktstream.evaluation.protocols import n_categories_of
    from ktstream.models import create
    from ktstream.models.checkpoint import load_checkpoint
    from ktstream.training.trainer import FitResult

    if args.checkpoint:
        model, items, concepts, _ = load_checkpoint(args.checkpoint)
        fit_file = args.checkpoint / "fit.json"
        fit_result = FitResult(**json.loads(fit_file.read_text())) if fit_file.exists() else None
        return model, items, concepts, fit_result
    items, concepts = build_vocabularies(train_recs)
    torch.manual_seed(args.seed)
    model = create(args.model, n_items=len(items), n_concepts=len(concepts),
                   n_categories=n_categories_of(train_recs), **_model_kwargs(args.model_arg))
    return model, items, concepts, None


def run(args: argparse.Namespace) -> int:
    from ktstream.data.eventlog import read_events
    from ktstream.data.histories import encode
    from ktstream.training.trainer import TrainConfig, fit

    recs = {name: read_events(getattr(args, name)) for name in ("train", "valid", "test")}
    model, items, concepts, fit_result = _load(args, recs["train"])
    train, valid, test = (encode(recs[n], items, concepts) for n in ("train", "valid", "test"))
    if args.model and args.fit_epochs > 0:
        fit_result = fit(model, train, valid, TrainConfig(epochs=args.fit_epochs, seed=args.seed,
                                                          device=args.device, progress=False))
    data = GateData(train, valid, test, split=args.split, fit_result=fit_result,
                    n_items=None if args.checkpoint else len(items),
                    n_concepts=None if args.checkpoint else len(concepts))
    checks = tuple(c.strip() for c in args.checks.split(",") if c.strip())
    cfg = GateConfig(seed=args.seed, checks=checks, precision=args.precision, n_learners=args.learners,
                     max_length=args.probe_length, path_chunk=args.path_chunk,
                     random_label_epochs=args.random_label_epochs, device=args.device)
    report = run_gate(model, data, cfg)
    print(report.table())
    if args.json:
        args.json.write_text(report.to_json())
    return 0 if report.passed else 1
