"""Serving ``predict`` of SAKT with each position variant and with MoH routing, on full windows.

The engine's per-event cost (``bench/engine_offline.py``) is dominated by short windows and shared
per-call work; this measures one ``predict`` of a batch of learners whose caches hold the whole
window, where a variant's extra work per (learner, head, key) shows. Configurations are timed in
interleaved rounds (the shared machine's load moves within minutes); CPU time, one thread.

    python bench/bench_position_variants.py --learners 256 --window 200 --rounds 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ktstream.data.histories import collate  # noqa: E402
from ktstream.models import create  # noqa: E402
from ktstream.models.attention import POSITIONS  # noqa: E402
from tests.conftest import random_learner  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="sakt")
    ap.add_argument("--learners", type=int, default=256)
    ap.add_argument("--window", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--calls", type=int, default=4, help="predict calls per configuration and round")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    W = args.window
    hist = collate([random_learner(rng, W + 1, 100, 20, 2, step_prob=0.0, learner_id=f"u{i}")
                    for i in range(args.learners)])
    configs = {f"position={p}": {"position": p} for p in POSITIONS}
    configs["MoH (shared_heads=1, routed_topk=2)"] = {"heads": 4, "shared_heads": 1, "routed_topk": 2}
    query, models, states = hist.at(W), {}, {}
    times: dict[str, list[float]] = {k: [] for k in configs}
    with torch.inference_mode():
        for k, cfg in configs.items():
            torch.manual_seed(0)
            models[k] = create(args.family, n_items=100, n_concepts=20, window=W, **cfg).eval()
            states[k] = models[k](hist.window(0, W))[1]
        for _ in range(args.rounds):
            for k, model in models.items():
                for _ in range(args.calls):
                    start = time.process_time()
                    model.predict(states[k], query)
                    times[k].append(time.process_time() - start)
    print(f"{args.family} predict, {args.learners} learners x W={W} (full windows), one thread, "
          f"{args.rounds} rounds x {args.calls} calls (CPU ms):")
    for k, ts in times.items():
        print(f"  {k:36s} median {1e3 * statistics.median(ts):6.2f}  least {1e3 * min(ts):6.2f}")


if __name__ == "__main__":
    main()
