"""Time-decay relation on vs off on EdNet KT1, time-ordered and prequential, with bootstrap CIs.

The lead's protocol (ktstream.evaluation.protocols.prequential_time): cut the
stream at the 0.6 and 0.8 quantiles of event time (C1, C0); vocabularies and
training from events before C1; early stopping on [C1, C0), predicted with the
learner's earlier history as context; every event at or after C0 scored, each
predicted before it is learned from. Two deviations, both for the shared
2-core CPU, neither touching the test data:
- training histories are cut into pieces of ``--piece`` interactions (each
  starts with an empty cache), so one optimiser step never holds a whole
  10,000-interaction history in memory;
- test predictions come from the training path over each whole history in
  one pass (identical to the serving path within 1e-5: the equivalence tests),
  since replaying 150,000 events one step at a time takes far longer on this
  CPU (one pass, so no window cut can split a step).
The two variants share seed, data and every other setting; the AUC difference
gets a paired bootstrap CI over test events and one over learners (clusters).

    python bench/attention_quality.py --model akt --epochs 4 --out /tmp/ednet_td.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from connectors.datasets import DATASET_FORMATS, dataset_dir, iter_events
from ktstream.data.histories import build_vocabularies, collate, encode
from ktstream.models import create
from ktstream.scoring.binary import auc
from ktstream.training.trainer import TrainConfig, fit


def load(dataset: str) -> list[dict]:
    return list(iter_events(DATASET_FORMATS[dataset], dataset_dir(dataset)))


def run_variant(records, c1, c0, model_name, kwargs, cfg, piece):
    train_recs = [r for r in records if r["event_time"] < c1]
    items, concepts = build_vocabularies(train_recs)
    pieces = [h.slice(s, s + piece) for h in encode(train_recs, items, concepts) for s in range(0, len(h), piece)]
    before_test = encode([r for r in records if r["event_time"] < c0], items, concepts)
    valid_scored = [h.times * 1000.0 >= c1 for h in before_test]
    torch.manual_seed(cfg.seed)
    model = create(model_name, n_items=len(items), n_concepts=len(concepts), **kwargs)
    result = fit(model, pieces, before_test, cfg, valid_scored=valid_scored)
    everything = encode(records, items, concepts)
    model.eval()
    with torch.no_grad():
        log_probs, _ = model(collate(everything))  # (B, T, K), one pass per learner
    probs = [log_probs[i, : len(h)].exp().numpy() for i, h in enumerate(everything)]
    ys, ps, who = [], [], []
    for i, (h, p) in enumerate(zip(everything, probs)):
        keep = (h.times * 1000.0 >= c0) & (h.responses >= 0)
        ys.append(h.responses[keep]), ps.append(p[keep, 1]), who.append(np.full(int(keep.sum()), i))
    return np.concatenate(ys), np.concatenate(ps), np.concatenate(who), result


def bootstrap(y, p_a, p_b, who, n=1000, seed=0):
    """95% CIs of AUC(b) - AUC(a): resampling test events, and resampling learners."""
    rng = np.random.default_rng(seed)
    by_event, by_learner = [], []
    learners = np.unique(who)
    index = [np.flatnonzero(who == u) for u in learners]
    for _ in range(n):
        i = rng.integers(0, len(y), len(y))
        by_event.append(auc(y[i], p_b[i]) - auc(y[i], p_a[i]))
        j = np.concatenate([index[k] for k in rng.integers(0, len(learners), len(learners))])
        by_learner.append(auc(y[j], p_b[j]) - auc(y[j], p_a[j]))
    ci = lambda d: [float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))]  # noqa: E731
    return ci(by_event), ci(by_learner)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="ednet_kt1_11users")
    p.add_argument("--model", default="akt")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-tokens", type=int, default=TrainConfig.batch_tokens,
                   help="positions per batch (0: --batch-size pieces per batch)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--piece", type=int, default=200)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    kwargs = {k: json.loads(v) for k, _, v in (a.partition("=") for a in args.model_arg)}
    records = load(args.dataset)
    times = np.array([r["event_time"] for r in records])
    c1, c0 = (int(np.quantile(times, q)) for q in (0.6, 0.8))
    cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, batch_tokens=args.batch_tokens, lr=args.lr,
                      patience=2, progress=False)
    out = {"dataset": args.dataset, "model": args.model, "model_args": kwargs, "train": cfg.__dict__,
           "events": len(records), "select_from_ms": c1, "test_from_ms": c0}
    preds = {}
    for name, td in [("without", False), ("time_decay", True)]:
        started = time.time()
        y, prob, who, fit_result = run_variant(records, c1, c0, args.model, {**kwargs, "time_decay": td}, cfg,
                                               args.piece)
        preds[name] = prob
        out[name] = {"test_auc": auc(y, prob), "best_epoch": fit_result.best_epoch,
                     "valid_auc": fit_result.best_valid, "minutes": round((time.time() - started) / 60, 1)}
        print(name, out[name], flush=True)
    ev, lr_ = bootstrap(y, preds["without"], preds["time_decay"], who)
    out.update(test_events=int(len(y)), learners=int(len(np.unique(who))),
               auc_difference=out["time_decay"]["test_auc"] - out["without"]["test_auc"],
               ci95_by_event=ev, ci95_by_learner=lr_)
    print(json.dumps({k: out[k] for k in ["auc_difference", "ci95_by_event", "ci95_by_learner", "test_events"]}))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=2, default=float)


if __name__ == "__main__":
    main()
