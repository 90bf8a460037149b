"""Long histories: one family on a data set's own splits, test AUC by the position in the history.

The controlled runs of docs/results.md ("Long histories"): the ordinary trainer (`fit`, windows of
``--chunk`` positions with the state carried across them) for ``--epochs`` epochs, then test AUC overall and
in buckets of history position 1-50, 51-100, 101-200, 201-400, >400, and the learned decay rates
(softplus(theta) per head) of every attention layer with the monotonic decay. One JSON line per run.
Options change one thing each: ``--kw`` the family's arguments (window, position), ``--no-decay`` freezes the
monotonic decay at 0, ``--restart L`` cuts each training history into pieces of L that start a fresh history
(what a trainer that does not carry context would do).

    python bench/long_history_probe.py --model simplekt --epochs 3
    python bench/long_history_probe.py --model simplekt --kw '{"window": 50}' --epochs 3
    python bench/long_history_probe.py --model dkt --kw '{"use_items": false}' --epochs 3
"""
import argparse
import json
import time

import numpy as np
import torch

from ktstream.cli.sources import load_splits, resolve
from ktstream.data.histories import build_vocabularies, encode
from ktstream.evaluation.protocols import n_categories_of
from ktstream.models import create
from ktstream.scoring.binary import auc
from ktstream.training.trainer import TrainConfig, fit, predict_histories, score

BUCKETS = ((1, 50), (51, 100), (101, 200), (201, 400), (401, None))

ap = argparse.ArgumentParser()
ap.add_argument("--dataset", default="dkvmn_statics2011")
ap.add_argument("--model", required=True)
ap.add_argument("--kw", default="{}")
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--lr-decay", type=float, default=0.5)
ap.add_argument("--chunk", type=int, default=200)
ap.add_argument("--restart", type=int, default=0,
                help="cut training histories into separate pieces of this many positions, each "
                     "starting a fresh history (0: whole histories)")
ap.add_argument("--max-train", type=int, default=0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--tag", default="")
ap.add_argument("--no-decay", action="store_true", help="monotonic decay rate frozen at 0 (theta=-30)")
ap.add_argument("--out", default=None, help="append the JSON line to this file too")
a = ap.parse_args()
torch.set_num_threads(1)
t0 = time.process_time()
src = resolve(argparse.Namespace(dataset=a.dataset, data=None, events=None, format=None))
train, valid, test, _ = load_splits(src)
if a.max_train:
    keep = list(dict.fromkeys(r["learner_id"] for r in train))[: a.max_train]
    keep = set(keep)
    train = [r for r in train if r["learner_id"] in keep]
items, concepts = build_vocabularies(train)
tr, va, te = (encode(r, items, concepts) for r in (train, valid, test))
if a.restart:
    tr = [h.slice(s, s + a.restart) for h in tr for s in range(0, len(h), a.restart)]
torch.manual_seed(a.seed)
model = create(a.model, n_items=len(items), n_concepts=len(concepts), n_categories=n_categories_of(train),
               **json.loads(a.kw))
if a.no_decay:
    from ktstream.models.attention import WindowAttention
    for m in model.modules():
        if isinstance(m, WindowAttention) and hasattr(m, "theta"):
            m.theta.data.fill_(-30.0)
            m.theta.requires_grad_(False)
cfg = TrainConfig(epochs=a.epochs, patience=a.epochs, lr=a.lr, lr_decay=a.lr_decay, chunk=a.chunk, seed=a.seed,
                  device="cpu", progress=False)
res = fit(model, tr, va, cfg)
model.eval()
y, p, pos = score(te, predict_histories(model, te, 64, "cpu"))
yb, pb = (y >= 1).astype(np.int64), 1.0 - p[:, 0]
row = {"no_decay": a.no_decay, "tag": a.tag, "dataset": a.dataset, "model": a.model, "kw": json.loads(a.kw), "epochs": a.epochs, "lr": a.lr,
       "lr_decay": a.lr_decay, "chunk": a.chunk, "restart": a.restart, "seed": a.seed,
       "train_learners": len(tr), "test_auc": auc(yb, pb),
       "valid": [round(h["valid_auc"], 4) for h in res.history], "best_epoch": res.best_epoch,
       "sec_per_epoch": res.seconds / max(1, len(res.history)), "cpu_s": time.process_time() - t0}
from ktstream.models.attention import WindowAttention
import torch.nn.functional as F
row["decay_rates"] = {n: [round(float(x), 4) for x in F.softplus(m.theta.detach())]
                      for n, m in model.named_modules() if isinstance(m, WindowAttention) and hasattr(m, "theta")}
for lo, hi in BUCKETS:
    sel = (pos >= lo) & (pos <= hi if hi else True)
    row[f"{lo}-{hi}" if hi else f">{lo - 1}"] = (auc(yb[sel], pb[sel]), int(sel.sum()))
print(json.dumps(row))
if a.out:
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")
