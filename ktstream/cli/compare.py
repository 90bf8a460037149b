"""`ktstream compare`: every model on every data set under one budget, as one table and an HTML section.

Per (data set, model, seed): the benchmark protocol on the data set's own splits, or the time-ordered
prequential protocol where the data carries a clock (datashop, EdNet KT1); a second run on coin-flip labels
(the leakage gate's random-label check); AUC on each learner's first 5 interactions next to AUC overall;
CPU minutes; the serving path's cost per event and its bytes of state per learner.

The plan (every model's configuration, the budget, learning rates chosen on validation with --lr-grid) is
written to DIR/plan.json before any test data is read; DIR/table.md, DIR/table.json (the rows and every
run's figures) and DIR/report.html follow.

    ktstream compare --models dkt,sakt --datasets dkvmn_statics2011,ednet_kt1_11users --seeds 3 -o runs/cmp
    ktstream compare --models dkt --data my_folder --format dkvmn --epochs 1 --max-learners 40 -o runs/mine
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from ktstream.cli.main import UsageError
from ktstream.cli.options import FORMATS, TRAIN_DEFAULTS, check_model, model_kwargs, set_threads

#: the table's columns (table.md, table.json's rows, the HTML section)
COLUMNS = ["dataset", "protocol", "rows", "model", "seeds", "test_auc", "test_auc_sd", "auc_first5", "accuracy",
           "log_loss", "random_label_auc", "random_label_bound", "cpu_minutes", "serve_us_per_event",
           "state_bytes_per_learner"]
#: a data set name ending in this keeps multi-skill problems as repeated rows (published numbers)
AS_GIVEN = ":as-given"
FIRST = 5  # "first interactions" of a learner: positions 1..FIRST


def register(sub) -> None:
    from ktstream.cli import COMMANDS

    p = sub.add_parser("compare", help=COMMANDS["compare"], description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--models", required=True, help="model families, comma-separated (e.g. dkt,sakt,akt)")
    p.add_argument("--datasets", default=None,
                   help=f"data sets under the data root, comma-separated; NAME{AS_GIVEN} keeps repeated rows")
    p.add_argument("--data", type=Path, action="append", default=[], metavar="PATH",
                   help="data of your own (repeatable), as for evaluate")
    p.add_argument("--format", metavar="NAME", help=f"format of --data: {', '.join(FORMATS)} (default: detected)")
    p.add_argument("--fold", type=int, default=1, help="fold k where the data has folds")
    p.add_argument("--model-arg", action="append", default=[], metavar="FAMILY.KEY=JSON",
                   help="a constructor argument of one family, e.g. sakt.dim=32 (repeatable)")
    p.add_argument("--epochs", type=int, default=TRAIN_DEFAULTS["epochs"], help="most training epochs")
    p.add_argument("--patience", type=int, default=TRAIN_DEFAULTS["patience"], help="early-stopping patience")
    p.add_argument("--lr", type=float, default=TRAIN_DEFAULTS["lr"], help="learning rate (without --lr-grid)")
    p.add_argument("--lr-grid", action="append", default=[], metavar="[FAMILY=]LR,LR",
                   help="learning rates to choose from per model and data set, on validation only; "
                        "FAMILY=LR,LR sets one family's grid (repeatable)")
    p.add_argument("--seeds", type=int, default=1, help="seeds per configuration: K..K+N-1 (K: --first-seed)")
    p.add_argument("--first-seed", type=int, default=0,
                   help="the first seed, to add seeds to an earlier run's without repeating them")
    p.add_argument("--max-learners", type=int, default=None,
                   help="keep at most this many learners per split (by id hash; smoke runs)")
    p.add_argument("--select-from", type=float, default=0.6, help="prequential: C1 as a quantile of event times")
    p.add_argument("--test-from", type=float, default=0.8, help="prequential: C0 as a quantile of event times")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="DIR",
                   help="output folder: plan.json, table.md, table.json, report.html")
    p.set_defaults(func=run)


# -- the plan ---------------------------------------------------------------------------------------------

def family_kwargs(pairs: list[str], models: list[str]) -> dict[str, dict[str, Any]]:
    """``FAMILY.KEY=JSON`` pairs as constructor arguments per family.

    >>> family_kwargs(["sakt.dim=32", "dkt.hidden=16"], ["dkt", "sakt"])
    {'dkt': {'hidden': 16}, 'sakt': {'dim': 32}}
    """
    out: dict[str, dict[str, Any]] = {m: {} for m in models}
    for pair in pairs:
        fam, dot, rest = pair.partition(".")
        if not dot or fam not in out:
            raise UsageError(f"--model-arg {pair!r} is not FAMILY.KEY=VALUE for a family in --models ({models})")
        out[fam].update(model_kwargs([rest]))
    return out


def family_grids(values: list[str], models: list[str], lr: float) -> dict[str, list[float]]:
    """``--lr-grid`` values as the learning rates each family chooses from: ``LR,LR`` for every family,
    ``FAMILY=LR,LR`` for one (families differ in the rates they need: a logistic baseline learns at rates a
    transformer diverges at); without either, ``lr`` alone.

    >>> family_grids(["0.001,0.002", "bkt=0.01,0.03"], ["dkt", "bkt"], 0.001)
    {'dkt': [0.001, 0.002], 'bkt': [0.01, 0.03]}
    """
    default, own = [lr], {}
    for value in values:
        fam, eq, rates = value.rpartition("=")
        try:
            grid = [float(x) for x in rates.split(",")]
        except ValueError:
            grid = []
        if not grid or min(grid) <= 0 or len(set(grid)) < len(grid) or (eq and fam not in models) or fam in own:
            raise UsageError(f"--lr-grid {value!r} is not [FAMILY=]LR,LR with distinct positive rates, "
                             f"given once per family in --models ({models})")
        if eq:
            own[fam] = grid
        else:
            default = grid
    return {m: own.get(m, default) for m in models}


def sources(args: argparse.Namespace) -> list[tuple[Any, bool]]:
    """(Source, keep repeated rows) per data set named, names checked before anything is read."""
    from ktstream.cli.sources import resolve

    out = []
    for name in [n for n in (args.datasets or "").split(",") if n]:
        keep = name.endswith(AS_GIVEN)
        ns = argparse.Namespace(dataset=name.removesuffix(AS_GIVEN), data=None, events=None, format=None)
        out.append((resolve(ns), keep))
    for path in args.data:
        out.append((resolve(argparse.Namespace(dataset=None, data=path, events=None, format=args.format)), False))
    if not out:
        raise UsageError("name at least one --datasets NAME or --data PATH")
    return out


def protocol_of(src) -> str:
    """prequential where the format carries event times and there are no split files, else benchmark."""
    from connectors.datasets.splits import EVENTS, TIMESTAMPED_FORMATS

    from ktstream.cli.sources import split_paths

    if src.format in TIMESTAMPED_FORMATS:
        return "prequential"
    if src.format == EVENTS and split_paths(src, 1)[2] is None:
        return "prequential"
    return "benchmark"


def subsample(records: list[dict], limit: int | None) -> list[dict]:
    """At most ``limit`` learners' records (the first by id hash, so every model sees the same ones)."""
    if limit is None:
        return records
    ids = sorted({r["learner_id"] for r in records}, key=lambda i: hashlib.sha1(i.encode()).hexdigest())[:limit]
    keep = set(ids)
    return [r for r in records if r["learner_id"] in keep]


def read_selection_data(src, keep: bool, fold: int, limit: int | None) -> tuple[list, list]:
    """(train, valid) records of a benchmark source, without opening its test file."""
    from ktstream.cli.sources import _held_out, _reader, split_paths

    read = _reader(src, keep)
    train_f, valid_f, test_f = split_paths(src, fold)
    if train_f is None or test_f is None:
        raise UsageError(f"{src.label} has no train/test split files for fold {fold}")
    train = read(train_f)
    if valid_f is not None:
        valid = read(valid_f)
    else:
        valid = [r for r in train if _held_out(r["learner_id"])]
        train = [r for r in train if not _held_out(r["learner_id"])]
    return subsample(train, limit), subsample(valid, limit)


def read_test(src, keep: bool, fold: int, limit: int | None) -> list[dict]:
    """The test records of a benchmark source: called only after plan.json is written."""
    from ktstream.cli.sources import _reader, split_paths

    return subsample(_reader(src, keep)(split_paths(src, fold)[2]), limit)


def read_stream(src, limit: int | None) -> list[dict]:
    from ktstream.cli.sources import load_stream

    return subsample(load_stream(src), limit)


def cutoffs(records: list[dict], select_from: float, test_from: float) -> tuple[int, int]:
    import numpy as np

    times = np.array([r["event_time"] for r in records if r.get("event_time") is not None])
    if len(times) == 0:
        raise UsageError("the prequential protocol needs event times")
    return int(np.quantile(times, select_from)), int(np.quantile(times, test_from))


def valid_score(model: str, kwargs: dict, train: list, valid: list, cfg, valid_scored_from: int | None = None) -> float:
    """Best validation score of ``model`` trained on ``train`` (prequential: ``valid`` holds every record
    before C0 and only those from ``valid_scored_from`` are scored)."""
    import torch

    from ktstream.data.histories import build_vocabularies, encode
    from ktstream.evaluation.protocols import n_categories_of
    from ktstream.models import create
    from ktstream.training.trainer import fit

    items, concepts = build_vocabularies(train)
    tr, va = encode(train, items, concepts), encode(valid, items, concepts)
    scored = None if valid_scored_from is None else [h.times * 1000.0 >= valid_scored_from for h in va]
    torch.manual_seed(cfg.seed)
    m = create(model, n_items=len(items), n_concepts=len(concepts), n_categories=n_categories_of(train), **kwargs)
    return float(fit(m, tr, va, cfg, valid_scored=scored).best_valid)


def make_plan(args, models: list[str], kw: dict, srcs: list) -> dict:
    """plan.json: per data set and model, the configuration and the learning rate (chosen on valid only)."""
    from ktstream.models import create

    grids = family_grids(args.lr_grid, models, args.lr)
    plan: dict[str, Any] = {"written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "budget": {"epochs": args.epochs, "patience": args.patience, "seeds": args.seeds,
                                       "first_seed": args.first_seed,
                                       "threads": args.threads, "max_learners": args.max_learners,
                                       "fold": args.fold, "lr_grid": grids},
                            "selection": "learning rate by best validation score at seed 0; no test data read",
                            "runs": []}
    for src, keep in srcs:
        proto = protocol_of(src)
        train = valid = None
        c1 = None
        if any(len(grids[m]) > 1 for m in models):
            if proto == "benchmark":
                train, valid = read_selection_data(src, keep, args.fold, args.max_learners)
            else:  # one stream: the records before C0 only (the test window is dropped unread by any model)
                stream = read_stream(src, args.max_learners)
                c1, c0 = cutoffs(stream, args.select_from, args.test_from)
                train = [r for r in stream if r["event_time"] < c1]
                valid = [r for r in stream if r["event_time"] < c0]
                del stream
        for model in models:
            grid, scores = grids[model], {}
            if len(grid) > 1:
                for lr in grid:
                    scores[lr] = valid_score(model, kw[model], train, valid, _cfg(args, 0, lr), c1)
            lr = max(scores, key=scores.get) if scores else grid[0]
            defaults = create(model, n_items=10, n_concepts=10, **kw[model]).config()
            defaults = {k: v for k, v in defaults.items() if k not in ("n_items", "n_concepts", "n_categories")}
            plan["runs"].append({"dataset": _label(src, keep), "protocol": proto, "model": model,
                                 "model_args": kw[model], "model_config": defaults, "lr": lr,
                                 "valid_by_lr": {str(k): v for k, v in scores.items()}})
    return plan


def _label(src, keep: bool) -> str:
    return Path(src.label).name + (AS_GIVEN if keep else "")


def _cfg(args, seed: int, lr: float):
    from ktstream.training.trainer import TrainConfig

    return TrainConfig(epochs=args.epochs, patience=args.patience, lr=lr, seed=seed, device=args.device,
                       progress=False)


# -- one run ----------------------------------------------------------------------------------------------

def serving_cost(model, histories, batch: int = 64, steps: int = 500) -> tuple[float, float]:
    """(microseconds per event, bytes of state per learner) of the serving path: the first ``steps``
    interactions of the ``batch`` longest histories stepped through predict-then-update together, as the
    engine batches learners; time over learners x steps (a padded slot costs what an event does, so this is
    the cost per event of a full batch); the state is measured at the end."""
    from ktstream.data.histories import collate
    from ktstream.models.stepwise import predict_stepwise

    part = [h.slice(0, steps) for h in sorted(histories, key=len, reverse=True)[:batch]]
    h = collate(part)
    model.cpu().eval()
    started = time.perf_counter()
    _, state = predict_stepwise(model, h)
    seconds = time.perf_counter() - started
    slots = h.mask.numel()  # every padded slot costs what an event does: a full batch's cost per event
    tensors = [v for v in _tensors(state) if v.dim() > 0 and v.shape[0] == len(part)]
    return 1e6 * seconds / max(slots, 1), sum(t.numel() * t.element_size() for t in tensors) / len(part)


def _tensors(state):
    import torch

    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for v in state.values():
            yield from _tensors(v)
    elif isinstance(state, (list, tuple)):
        for v in state:
            yield from _tensors(v)


def first_auc(model, items, concepts, protocol: str, test: list[dict], served: dict | None = None
              ) -> tuple[float, float, list]:
    """(AUC on positions 1..FIRST, AUC overall, the scored histories), predictions made as the protocol makes
    them (benchmark: the training path over the test split; prequential: the serving pass that the protocol
    made, ``served``: its ``histories``, ``probs`` and ``scored``, events >= C0)."""
    import numpy as np

    from ktstream.data.histories import encode
    from ktstream.scoring.binary import auc
    from ktstream.training.trainer import predict_histories, score

    model.cpu().eval()
    if protocol == "benchmark":
        hs = encode(test, items, concepts)
        probs, scored = predict_histories(model, hs, 64, "cpu"), None
    else:
        hs, probs, scored = served["histories"], served["probs"], served["scored"]
    y, p, pos = score(hs, probs, scored)
    yb, pb = (y >= 1).astype(np.int64), 1.0 - p[:, 0]
    early = pos <= FIRST
    return auc(yb[early], pb[early]), auc(yb, pb), hs


def one_run(model: str, kwargs: dict, lr: float, seed: int, args, protocol: str, splits: dict) -> dict:
    """Real labels, then coin flips, of one model, data set and seed; the figures of the table."""
    from ktstream.evaluation.protocols import benchmark, prequential_time
    from ktstream.leakage.config import GateConfig
    from ktstream.leakage.random_labels import coin_flip_labels, null_bound

    cfg = _cfg(args, seed, lr)
    artifacts: dict = {}
    cpu, wall = time.process_time(), time.perf_counter()
    if protocol == "benchmark":
        tr, va, te = splits["train"], splits["valid"], splits["test"]
        result = benchmark(model, tr, va, te, cfg, kwargs, artifacts)
    else:
        c1, c0 = splits["c1"], splits["c0"]
        result = prequential_time(model, splits["records"], c1, c0, cfg, kwargs, artifacts=artifacts)
    cpu_minutes, wall_minutes = (time.process_time() - cpu) / 60, (time.perf_counter() - wall) / 60
    first5, overall, hs = first_auc(artifacts["model"], artifacts["items"], artifacts["concepts"], protocol,
                                    splits.get("test", []), None if protocol == "benchmark" else artifacts)
    us, state_bytes = serving_cost(artifacts["model"], hs)
    if protocol == "benchmark":
        flipped = [coin_flip_labels(r, seed + i) for i, r in enumerate((tr, va, te))]
        coin = benchmark(model, *flipped, cfg, kwargs)
    else:
        coin = prequential_time(model, coin_flip_labels(splits["records"], seed), c1, c0, cfg, kwargs)
    n1 = int(round(coin["test"]["n"] * coin["test"]["share_correct"]))
    gate = GateConfig()
    t = result["test"]
    return {"model": model, "seed": seed, "lr": lr, "test_auc": t["auc"], "auc_overall_recomputed": overall,
            "auc_first5": first5, "accuracy": t["accuracy"], "log_loss": t["log_loss"], "n": t["n"],
            "auc_by_history_length": t.get("auc_by_history_length"), "best_epoch": result["fit"]["best_epoch"],
            "best_valid": result["fit"]["best_valid"], "wall_minutes": wall_minutes,
            "random_label_auc": coin["test"]["auc"],
            "random_label_bound": null_bound(n1, coin["test"]["n"] - n1, gate.z, gate.min_bound),
            "cpu_minutes": cpu_minutes, "serve_us_per_event": us, "state_bytes_per_learner": state_bytes,
            "counts": result["counts"]}


# -- the command ------------------------------------------------------------------------------------------

def aggregate(dataset: str, protocol: str, rows: str, runs: list[dict]) -> dict:
    """One table row: the mean over seeds of every figure, and the standard deviation of test AUC."""
    mean = lambda k: statistics.fmean(r[k] for r in runs)  # noqa: E731
    aucs = [r["test_auc"] for r in runs]
    return {"dataset": dataset, "protocol": protocol, "rows": rows, "model": runs[0]["model"], "seeds": len(runs),
            "test_auc": mean("test_auc"), "test_auc_sd": statistics.stdev(aucs) if len(aucs) > 1 else None,
            "auc_first5": mean("auc_first5"), "accuracy": mean("accuracy"), "log_loss": mean("log_loss"),
            "random_label_auc": mean("random_label_auc"), "random_label_bound": mean("random_label_bound"),
            "cpu_minutes": mean("cpu_minutes"), "serve_us_per_event": mean("serve_us_per_event"),
            "state_bytes_per_learner": int(round(mean("state_bytes_per_learner")))}


def by_history_length(runs: list[dict]) -> list[dict]:
    """One row per (data set, model): test AUC in each history-length bucket, the mean over seeds (NaN where a
    bucket has no test prediction or one class only), and the bucket's test predictions (``n 1-2`` ...), so a
    gap on long histories (the long-history question) reads off the same table as the overall figures."""
    from ktstream.scoring.binary import LENGTH_LABELS

    labels, rows = LENGTH_LABELS, {}
    for r in runs:
        rows.setdefault((r["dataset"], r["model"]), []).append(r["auc_by_history_length"] or {})
    out = []
    for (dataset, model), buckets in rows.items():
        row: dict[str, Any] = {"dataset": dataset, "model": model}
        for label in labels:
            aucs = [b[label]["auc"] for b in buckets if label in b and b[label]["auc"] == b[label]["auc"]]
            row[label] = statistics.fmean(aucs) if aucs else float("nan")
        for label in labels:
            row[f"n {label}"] = buckets[0].get(label, {}).get("n", 0)
        out.append(row)
    return out


def run(args: argparse.Namespace) -> int:
    models = [m for m in args.models.split(",") if m]
    kw = family_kwargs(args.model_arg, models)
    for m in models:
        check_model(m, kw[m])
    family_grids(args.lr_grid, models, args.lr)  # a malformed grid fails before anything is read
    srcs = sources(args)
    if args.seeds < 1 or args.first_seed < 0:
        raise UsageError("--seeds must be at least 1 and --first-seed at least 0")
    set_threads(args)
    from ktstream.cli.sources import rows_policy
    from ktstream.scoring.binary import LENGTH_LABELS, format_table

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(args, models, kw, srcs)
    (out / "plan.json").write_text(json.dumps(plan, indent=2, default=float))
    lr_of = {(r["dataset"], r["model"]): r["lr"] for r in plan["runs"]}
    table, every = [], []
    for src, keep in srcs:
        label, proto = _label(src, keep), protocol_of(src)
        if proto == "benchmark":
            train, valid = read_selection_data(src, keep, args.fold, args.max_learners)
            splits = {"train": train, "valid": valid, "test": read_test(src, keep, args.fold, args.max_learners)}
            rows = rows_policy(src.format, keep)
        else:
            records = read_stream(src, args.max_learners)
            c1, c0 = cutoffs(records, args.select_from, args.test_from)
            splits, rows = {"records": records, "c1": c1, "c0": c0}, "as given"
        for model in models:
            runs = [one_run(model, kw[model], lr_of[(label, model)], s, args, proto, splits)
                    for s in range(args.first_seed, args.first_seed + args.seeds)]
            for r in runs:
                r.update(dataset=label, protocol=proto)
            every += runs
            table.append(aggregate(label, proto, rows, runs))
            print(format_table([table[-1]], COLUMNS), flush=True)
    lengths = by_history_length(every)
    length_columns = ["dataset", "model", *LENGTH_LABELS, *(f"n {label}" for label in LENGTH_LABELS)]
    text = format_table(table, COLUMNS)
    (out / "table.md").write_text(f"{text}\n\nTest AUC by the position of the predicted interaction in its learner's "
                                  f"history (mean over seeds; n: test predictions):\n\n"
                                  f"{format_table(lengths, length_columns)}\n")
    (out / "table.json").write_text(json.dumps({"columns": COLUMNS, "rows": table, "runs": every, "plan": plan,
                                                "by_history_length": lengths}, indent=2, default=float))
    from ktstream.reports.comparison import comparison_page

    (out / "report.html").write_text(comparison_page(table, COLUMNS, plan, (lengths, length_columns)))
    print(text)
    print(f"wrote {out}: plan.json, table.md, table.json, report.html")
    return 0
