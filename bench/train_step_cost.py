"""CPU cost of one training batch per model family: forward and backward on the same synthetic batch.

The families without a fused kernel (BKT, the memory-network and ordinal families) step through positions
in Python, so their cost per batch is mostly per-step overhead; this prints each family's milliseconds per
forward+backward at its default size, and as a ratio to DKT's (a cuDNN-style fused LSTM) in the same run.

    python bench/train_step_cost.py --families bkt,dkvmn,deep-gpcm,dkt,akt --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ktstream.data.histories import Histories  # noqa: E402
from ktstream.models import create  # noqa: E402
from ktstream.models.families import names  # noqa: E402


def synthetic_batch(learners: int, length: int, n_items: int, n_concepts: int, seed: int = 0) -> Histories:
    """Full histories; 30% of the interactions carry a second concept, as multi-skill items do."""
    g = torch.Generator().manual_seed(seed)
    concepts = torch.randint(2, n_concepts, (learners, length, 2), generator=g)
    concepts[..., 1] = torch.where(torch.rand(learners, length, generator=g) < 0.3, concepts[..., 1], 0)
    return Histories(items=torch.randint(1, n_items, (learners, length), generator=g), concepts=concepts,
                     responses=torch.randint(0, 2, (learners, length), generator=g),
                     times=torch.full((learners, length), float("nan"), dtype=torch.float64),
                     step_start=torch.arange(length).repeat(learners, 1),
                     mask=torch.ones(learners, length, dtype=torch.bool))


def cost_ms(family: str, batch: Histories, n_items: int, n_concepts: int, repeat: int) -> float:
    """Median milliseconds of CPU time per forward+backward, after one warm-up pass."""
    torch.manual_seed(0)
    model = create(family, n_items=n_items, n_concepts=n_concepts).train()
    times = []
    for i in range(repeat + 1):
        started = time.process_time()
        log_probs, _ = model(batch)
        log_probs[..., -1].sum().backward()
        if i:
            times.append(1000 * (time.process_time() - started))
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=",".join(names()), help="comma-separated (default: every registered)")
    p.add_argument("--learners", type=int, default=8, help="histories per batch (the trainer's 1,600 positions)")
    p.add_argument("--length", type=int, default=200, help="positions per history (the training window)")
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--concepts", type=int, default=125)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batch = synthetic_batch(args.learners, args.length, args.items, args.concepts)
    families = [f for f in args.families.split(",") if f]
    ms = {f: cost_ms(f, batch, args.items, args.concepts, args.repeat) for f in dict.fromkeys(["dkt", *families])}
    print(f"{args.learners} x {args.length} positions, {args.threads} thread(s), median of {args.repeat}")
    for f in families:
        print(f"{f:16s} {ms[f]:8.1f} ms per forward+backward   {ms[f] / ms['dkt']:5.2f} x dkt")


if __name__ == "__main__":
    main()
