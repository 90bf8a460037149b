"""`ktstream check-leakage`: run the leakage gate on a model and its train/valid/test data.

The model is a saved checkpoint (``--checkpoint``, with the ``fit.json`` that ``ktstream train`` and
``ktstream evaluate -o`` write beside it, so the gate also checks what selection read), or a fresh
family (``--model``), optionally fitted first (``--fit-epochs``). ``--run DIR`` takes all of it from a
run folder of ``ktstream evaluate -o DIR``: the model in DIR/ckpt, the records in
DIR/{train,valid,test}.parquet, the split kind from its results.json. Otherwise the data is three event
files (``--train --valid --test``) or a data set's split files (``--dataset`` / ``--data``).
Vocabularies come from the checkpoint, else from the training records only. Prints the report table;
``-o/--out`` writes the report as JSON; the exit status is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ktstream.cli.main import UsageError
from ktstream.cli.options import add_data, check_model, existing, model_kwargs

#: ``ktstream.leakage.GateConfig``'s defaults, written out so that ``--help`` needs no torch (tests/cli checks them).
GATE_DEFAULTS = {"random_label_epochs": 2, "n_learners": 8, "max_length": 200, "path_chunk": 16}


def register(sub) -> None:
    p = sub.add_parser("check-leakage", help="run the leakage gate (perturbation, random labels, protocol, data)",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", type=Path, metavar="DIR", help="run folder of `ktstream evaluate -o DIR`")
    which.add_argument("--checkpoint", type=Path, metavar="DIR",
                       help="model to load: checkpoint folder (config.json, weights, fit.json)")
    which.add_argument("--model", metavar="FAMILY", help="model family to build fresh")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON", help="with --model: constructor "
                   "argument (repeatable)")
    data = add_data(p, required=False)
    data.add_argument("--train", type=Path, metavar="FILE", help="training events (.jsonl / .parquet), with "
                      "--valid and --test")
    p.add_argument("--valid", type=Path, metavar="FILE", help="validation events")
    p.add_argument("--test", type=Path, metavar="FILE", help="test events")
    p.add_argument("--split", choices=["learner", "time"], default=None,
                   help="how the data was split (default: time for a prequential run, else learner)")
    p.add_argument("--fit-epochs", type=int, default=0, help="with --model: fit this many epochs first")
    p.add_argument("--checks", default=None, help="comma-separated checks to run (default: all of them)")
    p.add_argument("--precision", choices=["fp64", "fp32"], default="fp64", help="precision of the model checks")
    p.add_argument("--random-label-epochs", type=int, default=GATE_DEFAULTS["random_label_epochs"],
                   help="epochs of the random-label training")
    p.add_argument("--learners", type=int, default=GATE_DEFAULTS["n_learners"],
                   help="learners sampled for model checks")
    p.add_argument("--probe-length", type=int, default=GATE_DEFAULTS["max_length"],
                   help="positions per probe history (continued by other learners when shorter; raised to cross "
                        "a windowed model's receptive field three times)")
    p.add_argument("--path-chunk", type=int, default=GATE_DEFAULTS["path_chunk"],
                   help="window of the trainer's paths in path_equivalence")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--device", default="auto", help="where random-label training runs")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("-o", "--out", type=Path, default=None, metavar="FILE", help="write the report as JSON here")
    p.set_defaults(func=run)


def _load(args: argparse.Namespace, train_recs: list[dict]):
    """(model, item vocabulary, concept vocabulary, FitResult or None)."""
    import torch

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
                   n_categories=n_categories_of(train_recs), **model_kwargs(args.model_arg))
    return model, items, concepts, None


def _inputs(args: argparse.Namespace):
    """Checks the options and fills in a run folder's; a function that reads (train, valid, test) records."""
    from ktstream.cli.sources import load_splits, resolve

    files = (args.train, args.valid, args.test)
    if args.run is not None:
        run = existing(args.run, "run folder")
        if any(f is not None for f in files) or args.dataset or args.data:
            raise UsageError("--run DIR brings its own data; drop --train/--valid/--test/--dataset/--data")
        args.checkpoint = existing(run / "ckpt", "the run's model (ckpt/)")
        files = args.train, args.valid, args.test = tuple(existing(run / f"{n}.parquet", f"the run's {n} records")
                                                          for n in ("train", "valid", "test"))
        results = run / "results.json"
        if args.split is None and results.is_file():
            protocol = json.loads(results.read_text()).get("protocol")
            args.split = "time" if protocol == "prequential_time" else "learner"
    if args.checkpoint is not None:
        existing(args.checkpoint, "checkpoint folder")
    if args.model_arg and args.model is None:
        raise UsageError("--model-arg goes with --model (a checkpoint carries its own configuration)")
    if args.model is not None:
        check_model(args.model, model_kwargs(args.model_arg))
    args.split = args.split or "learner"
    if any(f is not None for f in files):
        if any(f is None for f in files):
            raise UsageError("give all three of --train, --valid and --test (or --dataset / --data / --run)")
        for name, f in zip(("--train", "--valid", "--test"), files):
            existing(f, name)
        from ktstream.data.eventlog import read_events

        return lambda: tuple(read_events(f) for f in files)
    src = resolve(args)
    if src is None:
        raise UsageError("name the data: --run DIR, --train/--valid/--test FILE, --dataset NAME or --data PATH")
    return lambda: load_splits(src, args.fold)[:3]


def run(args: argparse.Namespace) -> int:
    read = _inputs(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from ktstream.cli.main import unknown
    from ktstream.data.histories import encode
    from ktstream.leakage import ALL_CHECKS, GateConfig, GateData, run_gate
    from ktstream.training.trainer import TrainConfig, fit

    checks = tuple(c.strip() for c in args.checks.split(",") if c.strip()) if args.checks else ALL_CHECKS
    for c in checks:
        if c not in ALL_CHECKS:
            raise unknown("check", c, ALL_CHECKS)

    recs = dict(zip(("train", "valid", "test"), read()))
    model, items, concepts, fit_result = _load(args, recs["train"])
    train, valid, test = (encode(recs[n], items, concepts) for n in ("train", "valid", "test"))
    if args.model and args.fit_epochs > 0:
        fit_result = fit(model, train, valid, TrainConfig(epochs=args.fit_epochs, seed=args.seed,
                                                          device=args.device, progress=False))
    data = GateData(train, valid, test, split=args.split, fit_result=fit_result,
                    n_items=None if args.checkpoint else len(items),
                    n_concepts=None if args.checkpoint else len(concepts))
    cfg = GateConfig(seed=args.seed, checks=checks, precision=args.precision, n_learners=args.learners,
                     max_length=args.probe_length, path_chunk=args.path_chunk,
                     random_label_epochs=args.random_label_epochs, device=args.device)
    report = run_gate(model, data, cfg)
    print(report.table())
    if args.out:
        args.out.write_text(report.to_json())
    return 0 if report.passed else 1
