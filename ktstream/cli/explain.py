"""`ktstream explain`: a heatmap of what an attention model read for one learner.

The learner's history is replayed through the serving path (each step
predicted from the cache as it was when the step began, then applied); at
every position the model's ``describe`` gives the attention of its last
retriever layer over the cached past interactions. Row t of the heatmap is the
prediction for interaction t, column j a past interaction; the weight left on
"no history" is the extra first column. The model is a checkpoint
(``ktstream train -o DIR``, ``ktstream evaluate -o DIR``'s DIR/ckpt) or, with
``--model``, a freshly built one: random weights, useful to look at the window
and decay structure only, so the command says so on stderr and in the title.

    ktstream explain events.jsonl --learner u1 --checkpoint ckpt/ -o attention.png
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ktstream.cli.main import UsageError
from ktstream.cli.options import check_model, existing, model_kwargs

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("explain", help="heatmap PNG of an attention model's weights over one learner's history")
    p.add_argument("events", type=Path, help="canonical events (.jsonl / .parquet)")
    p.add_argument("--learner", required=True, help="learner_id to explain")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", type=Path, metavar="DIR",
                       help="model to load: checkpoint folder (config.json + weights.safetensors)")
    which.add_argument("--model", metavar="FAMILY",
                       help="an untrained model of this family (random weights: the window and decay structure only)")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON",
                   help="with --model: constructor argument (repeatable)")
    p.add_argument("--last", type=int, default=60, help="show the last N positions")
    p.add_argument("-o", "--out", type=Path, default=Path("attention.png"), metavar="FILE", help="PNG to write")
    p.set_defaults(func=run)


def _load(args, records):
    import torch

    from ktstream.data.histories import build_vocabularies
    from ktstream.evaluation.protocols import n_categories_of
    from ktstream.models import create
    from ktstream.models.checkpoint import load_checkpoint

    if args.checkpoint:
        model, items, concepts, _ = load_checkpoint(args.checkpoint)
        return model, items, concepts
    items, concepts = build_vocabularies(records)
    torch.manual_seed(0)
    model = create(args.model, n_items=len(items), n_concepts=len(concepts),
                   n_categories=n_categories_of(records), **model_kwargs(args.model_arg))
    return model.eval(), items, concepts


def run(args: argparse.Namespace) -> int:
    existing(args.events, "events file")
    if args.checkpoint is not None:
        existing(args.checkpoint, "checkpoint folder")
        if args.model_arg:
            raise UsageError("--model-arg goes with --model (a checkpoint carries its own configuration)")
    else:
        check_model(args.model, model_kwargs(args.model_arg))
        print(f"ktstream: warning: --model {args.model} has random weights (it was never trained): the map shows "
              f"the model's structure, not what a trained model reads; give --checkpoint DIR for that",
              file=sys.stderr)
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ktstream.data.eventlog import read_events
    from ktstream.data.histories import collate, encode
    from ktstream.models.stepwise import attention_map

    records = read_events(args.events)
    mine = [r for r in records if r["learner_id"] == args.learner]
    if not mine:
        from ktstream.cli.main import unknown

        raise unknown("learner", args.learner, {r["learner_id"] for r in records}, f" in {args.events}")
    model, items, concepts = _load(args, records)
    first = collate(encode(mine, items, concepts)).at(0)
    if "attention" not in model.predict(model.init_state(1), first, describe=True)[1]:
        raise UsageError(f"model family {model.name!r} has no attention to explain (try sakt, akt, simplekt)")
    hist = collate(encode(mine, items, concepts))
    heat, infos = attention_map(model, hist)
    n = min(args.last, hist.shape[1])
    lo = hist.shape[1] - n
    shown = np.concatenate([heat[lo:, :1], heat[lo:, 1 + lo:]], 1)  # (n, 1 + n)
    entropy = float(np.mean([float(i["attention_entropy"]) for i in infos]))
    diversity = float(np.mean([float(i["head_diversity"]) for i in infos]))
    fig, ax = plt.subplots(figsize=(8, 7))
    im = ax.imshow(shown, cmap="viridis", aspect="auto", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="attention weight (head average, last retriever layer)")
    ticks = list(range(0, n, max(1, n // 12)))
    xt = [t for t in ticks if t >= max(1, n // 24)]  # keep clear of the "none" column
    ax.set_xticks([0] + [1 + t for t in xt], ["none"] + [str(lo + t) for t in xt])
    ax.set_yticks(ticks, [str(lo + t) for t in ticks])
    resp = hist.responses[0, lo:].numpy()
    ax.scatter(1 + np.arange(n), np.full(n, n - 0.5), c=np.where(resp > 0, "tab:green", "tab:red"), s=8, marker="s",
               clip_on=False)
    ax.set_xlabel("past interaction (square: green correct, red not)")
    ax.set_ylabel("prediction for interaction")
    untrained = "UNTRAINED (random weights) " if args.checkpoint is None else ""
    ax.set_title(f"{untrained}{model.name} - learner {args.learner}: mean entropy {entropy:.2f} nats, "
                 f"head diversity {diversity:.3f}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: {hist.shape[1]} interactions, last {n} shown; mean attention entropy "
          f"{entropy:.3f} nats, head diversity (JS) {diversity:.4f}")
    if "route_gates" in infos[0]:
        on = np.stack([(i["route_gates"] > 0).numpy() for i in infos]).mean(0)
        print("head routing: share of positions each head is on: " + ", ".join(f"h{h} {s:.2f}" for h, s in enumerate(on)))
    return 0
