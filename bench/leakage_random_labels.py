"""Random-label AUC of every model family on ASSISTments 2009 (AKT's fold 1): merged vs rows as given.

Every response is replaced by a fair coin flip, drawn once per ORIGINAL
interaction and copied to the rows that expand it (a multi-skill problem that
the source repeats once per skill), which is how pyKT's preprocessing carries a
response forward. A fresh model is trained on the flipped training split,
selected on the flipped validation split, and scored once on the flipped test
split; its AUC must stay within 0.5 +/- z * sqrt((n1 + n0 + 1) / (12 n1 n0))
(floored at 0.02), the gate's bound.

- "merged": the ``akt`` converter's default, one interaction per problem
  attempt (ours);
- "rows as given": ``keep_repeated_rows=True``, 15.7% of rows repeat the row
  before; expected to fail as pyKT did (0.64 reported).

Usage: python bench/leakage_random_labels.py [--models dkt,sakt] [--epochs 6] [--rows both|merged|given]
       [--train-learners N]
Prints a markdown table (and writes it with --out).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from connectors.datasets.akt import akt_events
from connectors.datasets.splits import dataset_dir
from ktstream.data.histories import build_vocabularies, encode
from ktstream.leakage import GateConfig, interaction_groups, random_label_auc, repeated_rows
from ktstream.models import create, family, names

# Smaller than the published sizes, so every family trains on one CPU thread in minutes.
BENCH_CONFIG = {
    "dkt": dict(dim=32, hidden=64),
    "sakt": dict(dim=32, heads=2, window=50, ffn=64),
    "akt": dict(dim=32, heads=2, window=50, ffn=64),
    "simplekt": dict(dim=32, heads=2, window=50, ffn=64),
}
MEMORY = dict(memory_size=20, key_dim=32, value_dim=32, summary_dim=32)


def bench_config(name: str) -> dict:
    if name in BENCH_CONFIG:
        return BENCH_CONFIG[name]
    return MEMORY if "memory_size" in family(name).tiny_config else {}


def load(keep_repeated_rows: bool, train_learners: int | None, seed: int):
    """Splits with coin-flip responses drawn per original interaction, encoded with training vocabularies."""
    folder = dataset_dir("assist2009_akt_pid")
    recs = {p: list(akt_events(folder / f"assist2009_pid_{p}1.csv", keep_repeated_rows=keep_repeated_rows))
            for p in ("train", "valid", "test")}
    if train_learners:
        keep = sorted({r["learner_id"] for r in recs["train"]})[:train_learners]
        keep = set(keep)
        recs["train"] = [r for r in recs["train"] if r["learner_id"] in keep]
    rng = np.random.default_rng(seed)
    everything = [r for p in recs.values() for r in p]
    items_all, concepts_all = build_vocabularies(everything)  # only to group rows by source problem
    flips = {}
    grouped = encode(everything, items_all, concepts_all)
    share = repeated_rows(grouped)
    for h in grouped:
        groups = interaction_groups(h)
        draws = rng.integers(0, 2, size=len(h))
        flips.update(zip(h.event_ids, draws[groups].tolist()))
    flipped = {p: [{**r, "response": flips[r["event_id"]]} for r in rs] for p, rs in recs.items()}
    items, concepts = build_vocabularies(flipped["train"])
    splits = [encode(flipped[p], items, concepts) for p in ("train", "valid", "test")]
    return splits, len(items), len(concepts), share[0] / share[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(n for n in names()))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--train-learners", type=int, default=None, help="cap on training learners (all by default)")
    ap.add_argument("--rows", choices=["both", "merged", "given"], default="both")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    variants = [("merged (ours)", False), ("rows as given", True)]
    variants = [v for v in variants if args.rows == "both" or v[1] == (args.rows == "given")]
    for label, keep in variants:
        (train, valid, test), n_items, n_concepts, share = load(keep, args.train_learners, args.seed)
        for name in args.models.split(","):
            started = time.time()
            torch.manual_seed(args.seed)
            model = create(name, n_items=n_items, n_concepts=n_concepts, **bench_config(name))
            cfg = GateConfig(seed=args.seed, random_label_epochs=args.epochs, random_label_lr=1e-3,
                             random_label_patience=2, device="cpu")
            r = random_label_auc(model, train, valid, test, cfg, relabel=False)
            verdict = "PASS" if abs(r["auc"] - 0.5) <= r["bound"] else "FAIL"
            rows.append(f"| {name} | {label} | {100 * share:.1f}% | {r['n_pos'] + r['n_neg']} | "
                        f"{r['auc']:.4f} | 0.5 ± {r['bound']:.4f} | {verdict} | {r['best_epoch']}/{r['epochs_run']} | "
                        f"{(time.time() - started) / 60:.1f} |")
            print(rows[-1], flush=True)
    header = ["| model | rows | expanded rows | test n | random-label AUC | bound | random_labels check "
              "| best/run epochs | minutes |",
              "|---|---|---|---|---|---|---|---|---|",
              "| pyKT (reported) | expanded concepts | - | - | 0.64 | - | would FAIL | - | - |"]
    table = "\n".join(header + rows)
    print("\n" + table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
