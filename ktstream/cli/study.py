"""`ktstream study`: recurrent against attention families over seeds, on synthetic learners whose answers
depend on one earlier interaction (a ground truth for attention) and optionally on a real data set.

Writes DIR/study.json (every run's figures, means, paired tests) and DIR/study.html (families over seeds
with paired t-tests, AUC and top-k alignment by distance, AUC by history length, entropy, sparsity and
ablation per head, heatmaps, seconds per epoch and memory).

    ktstream study --models dkt,atkt,sakt,simplekt,akt --seeds 3 -o runs/study
    ktstream study --models dkt,sakt --seeds 2 --learners 30 --length 60 --distances 1,5,20 --epochs 1 -o /tmp/s
    ktstream study --models dkt,sakt --dataset assist2009_akt_pid --max-learners 200 -o runs/study-assist
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ktstream.cli.main import UsageError
from ktstream.cli.options import TRAIN_DEFAULTS, check_model, set_threads


def register(sub) -> None:
    from ktstream.cli import COMMANDS

    p = sub.add_parser("study", help=COMMANDS["study"], description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--models", default="dkt,atkt,sakt,simplekt,akt", help="model families, comma-separated")
    p.add_argument("--model-arg", action="append", default=[], metavar="FAMILY.KEY=JSON",
                   help="a constructor argument of one family, e.g. sakt.dim=32 (repeatable)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (data, weights, batches)")
    p.add_argument("--learners", type=int, default=300, help="synthetic learners (60/20/20 train/valid/test)")
    p.add_argument("--length", type=int, default=240, help="interactions per synthetic learner")
    p.add_argument("--distances", default="1,2,5,10,20,50,100,200", help="prerequisite distances d")
    p.add_argument("--pairs", type=int, default=12, help="prerequisite pairs per synthetic learner")
    p.add_argument("--topk", type=int, default=3, help="k of the top-k alignment")
    p.add_argument("--no-synthetic", action="store_true", help="only the real data set")
    p.add_argument("--dataset", default=None, help="a real data set too (benchmark splits), e.g. assist2009_akt_pid")
    p.add_argument("--max-learners", type=int, default=None, help="real data: at most this many learners per split")
    p.add_argument("--epochs", type=int, default=TRAIN_DEFAULTS["epochs"], help="most training epochs")
    p.add_argument("--patience", type=int, default=TRAIN_DEFAULTS["patience"], help="early-stopping patience")
    p.add_argument("--lr", type=float, default=TRAIN_DEFAULTS["lr"], help="learning rate")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="DIR", help="study.json and study.html")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ktstream.cli.compare import family_kwargs

    models = [m for m in args.models.split(",") if m]
    kw = family_kwargs(args.model_arg, models)
    for m in models:
        check_model(m, kw[m])
    distances = [int(d) for d in args.distances.split(",") if d]
    if args.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    if not args.no_synthetic and args.length <= max(distances):
        raise UsageError(f"--length ({args.length}) must exceed the largest distance ({max(distances)})")
    if args.no_synthetic and not args.dataset:
        raise UsageError("--no-synthetic needs --dataset")
    src = None
    if args.dataset:
        from ktstream.cli.sources import resolve

        src = resolve(argparse.Namespace(dataset=args.dataset, data=None, events=None, format=None))
    set_threads(args)
    from ktstream.evaluation.attention_study import study
    from ktstream.reports.study import study_page

    seeds = list(range(args.seeds))
    budget = {"epochs": args.epochs, "patience": args.patience, "lr": args.lr, "device": args.device}
    parts = []
    if not args.no_synthetic:
        from ktstream.data.simulate_prerequisite import simulate_prerequisite

        cache: dict = {}

        def data(seed):
            if seed not in cache:
                cache.clear()
                cache[seed] = simulate_prerequisite(n_learners=args.learners, length=args.length, distances=distances,
                                                    pairs_per_learner=args.pairs, n_pairs=max(40, args.pairs),
                                                    seed=seed)
            return cache[seed]

        def splits(seed):
            recs = data(seed).records
            ids = list(dict.fromkeys(r["learner_id"] for r in recs))
            a, b = int(0.6 * len(ids)), int(0.8 * len(ids))
            return tuple([r for r in recs if r["learner_id"] in set(ids[lo:hi])] for lo, hi in ((0, a), (a, b),
                                                                                                (b, len(ids))))

        res = study(models, kw, splits, seeds, budget, lambda s: data(s).truth, args.topk)
        parts.append({"name": "synthetic prerequisites", "key": "synthetic", **res})
    if src is not None:
        from ktstream.cli.compare import subsample
        from ktstream.cli.sources import load_splits

        train, valid, test, _ = load_splits(src)
        fixed = tuple(subsample(r, args.max_learners) for r in (train, valid, test))
        res = study(models, kw, lambda s: fixed, seeds, budget, None, args.topk)
        parts.append({"name": src.label, "key": "real", **res})
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    meta = (f"families {', '.join(models)}; seeds {len(seeds)}; budget {json.dumps(budget)}; synthetic: "
            f"{args.learners} learners x {args.length}, distances {distances}")
    (out / "study.json").write_text(json.dumps({"meta": meta, "parts": parts}, indent=1, default=float))
    (out / "study.html").write_text(study_page(parts, meta))
    print(f"wrote {out}: study.json, study.html")
    return 0
