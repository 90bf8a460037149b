"""Deep-GPCM vs CORAL vs an item-distribution baseline on ordered outcomes derived from ASSISTments.

Data: /work/shared/data/assist2009_skillbuilder_raw_2skills/as.csv converted by
`connectors.datasets.ordinal.assistments_ordinal_events` (K=4, rule in its
docstring). Learners are split 80/20 by md5(learner_id) (deterministic); 1 in 8
training learners (by the same hash) is the validation set for early stopping;
item and concept vocabularies come from the remaining training learners only.
Every prediction is prequential (training path, equal to serving by the
contract tests). The baseline predicts each item's category distribution on
the training learners (add-one smoothed; unseen items get the overall one).
Each model is trained with ``--seeds`` seeds; the table gives the mean (and the
spread, max - min, of QWK).

Usage: python bench/ordinal_assist.py [--seeds 0 1 2] [--data PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import numpy as np
import torch

from connectors.datasets.ordinal import assistments_ordinal_events
from ktstream.data.histories import build_vocabularies, encode
from ktstream.models import create
from ktstream.scoring.ordinal import ordinal_report
from ktstream.training.ordinal_losses import class_weights, make_loss
from ktstream.training.trainer import predict_histories, score
from ordinal_recovery import train  # bench/ is the script's own folder, hence on sys.path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "assist2009_skillbuilder_raw_2skills" / "as.csv"
K = 4
SIZES = dict(memory_size=10, key_dim=32, value_dim=64, summary_dim=32)
MODELS = [  # (label, family, options, loss config, class weights from the training learners)
    ("deep-gpcm", "deep-gpcm", {}, {"ce": 1.0}, None),
    ("deep-gpcm, unanchored", "deep-gpcm", {"anchored": False}, {"ce": 1.0}, None),
    ("deep-gpcm, one-hot responses", "deep-gpcm", {"response_embedding": "one_hot"}, {"ce": 1.0}, None),
    ("deep-gpcm, ce + 0.5 qwk", "deep-gpcm", {}, {"ce": 1.0, "qwk": 0.5}, None),
    ("deep-gpcm, weighted ordinal (sqrt-balanced)", "deep-gpcm", {}, {"weighted_ordinal": 1.0}, "sqrt_balanced"),
    ("dkvmn-coral", "dkvmn-coral", {}, {"ce": 1.0}, None),
    ("dkvmn-coral, coral loss", "dkvmn-coral", {}, {"coral": 1.0}, None),
    ("deep-gpcm-blend", "deep-gpcm-blend", {}, {"ce": 1.0}, None),
    ("dkvmn (softmax head, one-hot responses)", "dkvmn", {}, {"ce": 1.0}, None),
]


def bucket(learner_id: str) -> int:
    return int(hashlib.md5(learner_id.encode("utf-8")).hexdigest(), 16)


def item_distribution(train_h, test_h) -> list[np.ndarray]:
    """Each test position predicted by its item's training category shares (add-one smoothed)."""
    counts: dict[int, np.ndarray] = {}
    for h in train_h:
        for i, r in zip(h.items, h.responses):
            counts.setdefault(int(i), np.ones(K))[r] += 1
    overall = sum(counts.values()) - len(counts) + 1
    table = {i: c / c.sum() for i, c in counts.items()}
    return [np.array([table.get(int(i), overall / overall.sum()) for i in h.items]) for h in test_h]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    started, cpu = time.time(), time.process_time()
    records = list(assistments_ordinal_events(args.data))
    test_ids = {r["learner_id"] for r in records if bucket(r["learner_id"]) % 5 == 0}
    valid_ids = {r["learner_id"] for r in records if r["learner_id"] not in test_ids and bucket(r["learner_id"]) // 5 % 8 == 0}
    fit_recs = [r for r in records if r["learner_id"] not in test_ids | valid_ids]
    items, concepts = build_vocabularies(fit_recs)
    fit_h = encode(fit_recs, items, concepts)
    valid_h = encode([r for r in records if r["learner_id"] in valid_ids], items, concepts)
    test_h = encode([r for r in records if r["learner_id"] in test_ids], items, concepts)
    print(f"{len(records)} interactions, {len(fit_h)}/{len(valid_h)}/{len(test_h)} train/valid/test learners, "
          f"{len(items) - 2} items; test categories {np.bincount(np.concatenate([h.responses for h in test_h]), minlength=K).tolist()}")
    y, p, _ = score(test_h, item_distribution(fit_h + valid_h, test_h))
    rows = [("item distribution (baseline)", [ordinal_report(p, y)])]
    train_y = torch.from_numpy(np.concatenate([h.responses for h in fit_h]))
    for label, fam, opts, loss, weighting in MODELS:
        weights = class_weights(train_y, K, weighting) if weighting else None
        reports = []
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = create(fam, n_items=len(items), n_concepts=len(concepts), n_categories=K, **SIZES, **opts)
            train(model, fit_h, valid_h, make_loss(loss, weights), epochs=args.epochs, patience=4, seed=seed,
                  log=lambda *_: None)
            y, p, _ = score(test_h, predict_histories(model, test_h))
            reports.append(ordinal_report(p, y))
        rows.append((label, reports))
    print(f"\n{len(y)} test interactions, {len(args.seeds)} seed(s) per model\n")
    print("| model | categorical acc | QWK (spread) | ordinal acc | MAE | Spearman | threshold AUCs |")
    print("|---|---|---|---|---|---|---|")
    for label, reports in rows:
        m = {k: float(np.mean([r[k] for r in reports])) for k in
             ("categorical_accuracy", "qwk", "ordinal_accuracy", "mae", "spearman")}
        spread = max(r["qwk"] for r in reports) - min(r["qwk"] for r in reports)
        aucs = np.mean([r["threshold_auc"] for r in reports], axis=0)
        print(f"| {label} | {m['categorical_accuracy']:.4f} | {m['qwk']:.4f} ({spread:.3f}) | "
              f"{m['ordinal_accuracy']:.4f} | {m['mae']:.4f} | {m['spearman']:.4f} | "
              f"{', '.join(f'{a:.3f}' for a in aucs)} |")
    print(f"\ntotal {time.process_time() - cpu:.0f} s CPU time ({time.time() - started:.0f} s wall, shared machine)")


if __name__ == "__main__":
    main()
