"""Options that several commands share, spelt and meaning the same everywhere, and their checks.

One name, one meaning across commands: ``--checkpoint DIR`` is a model to load; ``-o/--out`` is where a
command writes (a file, or a run folder); ``--dataset NAME`` a data set under the data root, ``--data
PATH [--format NAME]`` data of your own; ``--events FILE`` one canonical event log. Defaults are written
out here (not read from ``TrainConfig``) so that ``--help`` imports no torch; tests/cli checks that
they equal the trainer's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ktstream.cli.main import UsageError, unknown

#: `connectors.datasets.CONVERTERS` and canonical event logs (tests/cli checks the list).
FORMATS = ("akt", "assistments-raw", "datashop", "dkt-csv", "dkt-synthetic", "dkvmn", "ednet-kt1", "events")
#: ``ktstream.training.trainer.TrainConfig``'s defaults (tests/cli checks them).
TRAIN_DEFAULTS = {"epochs": 30, "batch_tokens": 1600, "batch_size": 32, "lr": 1e-3, "patience": 4, "chunk": 200}


def add_data(p: argparse.ArgumentParser, *, events: bool = False, fold: bool = True, required: bool = True):
    """``--dataset NAME | --data PATH [--format NAME]`` (``| --events FILE``) and ``--fold K``."""
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--dataset", metavar="NAME",
                   help="a data set folder under the data root ($KTSTREAM_DATA), e.g. dkvmn_statics2011")
    g.add_argument("--data", type=Path, metavar="PATH",
                   help="your own data: a folder of split files (<name>_train.csv, <name>_test.csv, "
                        "<name>_train1.csv / <name>_valid1.csv; or train.jsonl, valid.jsonl, test.jsonl) or files "
                        "in one of the --format formats")
    if events:
        g.add_argument("--events", type=Path, metavar="FILE", help="a canonical event log (.jsonl / .parquet)")
    p.add_argument("--format", metavar="NAME",
                   help=f"format of --data: {', '.join(FORMATS)} (default: detected from the files)")
    if fold:
        p.add_argument("--fold", type=int, default=1,
                       help="fold k: train{k}/valid{k} (+ test{k} for AKT folds) where the data has folds")
    return g


def check_memory_limit(value: str | None) -> None:
    """A `UsageError` unless ``value`` (``--memory-limit``, a DuckDB memory limit) is None or a size."""
    from ktstream.data.columnar import memory_bytes

    if value is None:
        return
    try:
        memory_bytes(value)
    except ValueError:
        raise UsageError(f"--memory-limit takes a size such as 512MB or 2GB, got {value!r}") from None


def add_model(p: argparse.ArgumentParser, default: str | None = "dkt", required: bool = False):
    p.add_argument("--model", default=default, required=required, metavar="FAMILY",
                   help="model family (dkt, sakt, akt, ...: the list is in docs/models.md)")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON",
                   help="model constructor argument, e.g. --model-arg hidden=200 (repeatable)")


def add_training(p: argparse.ArgumentParser) -> None:
    """The trainer's options (``ktstream.training.trainer.TrainConfig``), the same for every command."""
    d = TRAIN_DEFAULTS
    p.add_argument("--epochs", type=int, default=d["epochs"], help="most training epochs")
    p.add_argument("--patience", type=int, default=d["patience"],
                   help="stop after this many epochs without a better validation score")
    p.add_argument("--batch-tokens", type=int, default=d["batch_tokens"],
                   help="positions per training batch, padding included (0: --batch-size learners per batch)")
    p.add_argument("--batch-size", type=int, default=d["batch_size"], help="learners per batch (--batch-tokens 0)")
    p.add_argument("--lr", type=float, default=d["lr"], help="learning rate")
    p.add_argument("--chunk", type=int, default=d["chunk"], help="positions per truncated-backprop window")
    p.add_argument("--seed", type=int, default=0, help="random seed (weights, batches)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def train_config(args: argparse.Namespace, **extra: Any):
    from ktstream.training.trainer import TrainConfig

    return TrainConfig(epochs=args.epochs, batch_size=args.batch_size, batch_tokens=args.batch_tokens, lr=args.lr,
                       patience=args.patience, chunk=args.chunk, seed=args.seed, device=args.device, **extra)


def set_threads(args: argparse.Namespace) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def model_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``KEY=JSON`` pairs as keyword arguments (a value that is not JSON is a string).

    >>> model_kwargs(["hidden=200", "name=x", "dropout=0.1"])
    {'hidden': 200, 'name': 'x', 'dropout': 0.1}
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--model-arg {pair!r} is not KEY=VALUE (e.g. --model-arg hidden=200)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def check_model(name: str, kwargs: dict[str, Any] | None = None) -> None:
    """A `UsageError` (with the closest family) unless ``name`` is a model family that takes ``kwargs``;
    checked before any data is read."""
    import inspect

    from ktstream.models import family, names

    if name not in names():
        raise unknown("model family", name, names())
    if kwargs:
        cls = family(name)
        params = inspect.signature(cls.__init__).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            bad = sorted(set(kwargs) - set(params) - {"self"})
            known = [k for k in params if k not in ("self", "n_items", "n_concepts", "n_categories")]
            if bad:
                raise unknown(f"--model-arg of {name}", bad[0], known)


def existing(path: Path | None, what: str) -> Path | None:
    """``path`` if it exists (checked before anything is read), else a one-line error naming it."""
    if path is not None and not Path(path).exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    return path
