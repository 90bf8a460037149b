"""Serving step with per-learner caches vs recomputing the window from scratch, on CPU.

For each attention family (default sizes, window W=200): 256 learners with a
history of 200 interactions. "cached": ``predict`` then ``update`` for one new
event from the cached state. "recompute": for the same event, embed and encode
the learner's last interactions from nothing (the encoders over every position
of the window, as they must be) and read the one new query; and, for reference,
the whole training-path ``forward`` over the window. Both give the same
prediction (checked). Then the bytes of cached state per learner at W=200.

    python bench/bench_attention_cache.py [--batch 256] [--history 200] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ktstream.data.histories import collate
from ktstream.models import create, kvcache
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/...` from anywhere
from tests.conftest import random_learner  # noqa: E402

N_ITEMS, N_CONCEPTS = 2000, 120
SMALL = {  # configs that keep the cache under 16 KB per learner at W=200
    "sakt": {"dim": 16, "heads": 2, "cache_dtype": "float16"},
    "simplekt": {"dim": 16, "heads": 2, "layers": 1, "cache_dtype": "float16"},
    "akt": {"dim": 8, "heads": 2, "question_layers": 0, "knowledge_layers": 1, "cache_dtype": "float16"},
}


def clock(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.inference_mode()
def bench(name: str, batch: int, history: int, reps: int) -> None:
    torch.manual_seed(0)
    model = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS).eval()
    rng = np.random.default_rng(0)
    learners = [random_learner(rng, history + 1, N_ITEMS, N_CONCEPTS, 2, step_prob=0.0, learner_id=f"u{i}")
                for i in range(batch)]
    full = collate(learners)
    past, new = full.window(0, history), full.at(history)
    _, state = model(past)  # the caches after 200 interactions

    def cached():
        probs = model.predict(state, new)
        return probs, model.update(state, new)

    field = model.receptive_field()
    ctx = full.window(max(0, history - field), history + 1)
    ctx.responses = ctx.responses.clone()
    ctx.responses[:, -1] = -1  # the new event is a query: its response is not known yet

    def recompute():  # the cheapest exact recomputation: encode the window, read one query
        B, T = ctx.shape
        applied = ctx.mask & (ctx.responses >= 0)
        pos = (applied.long().cumsum(1) - applied.long())
        q = model.embed_question(ctx.items, ctx.concepts)
        y = model.embed_interaction(ctx.items, ctx.concepts, ctx.responses, q)
        ks = model._append(None, q[:, :-1], y[:, :-1], pos[:, :-1], applied[:, :-1], ctx.times[:, :-1])
        x, _ = model._retrieve(ks, q[:, -1:], pos[:, -1:], ctx.times[:, -1:], 0)
        return model._log_probs(x, q[:, -1:])[:, 0].exp()

    def forward_all():
        return model(ctx)[0][:, -1].exp()

    gap = max((cached()[0] - recompute()).abs().max().item(), (cached()[0] - forward_all()).abs().max().item())
    t_cached, t_re, t_fwd = clock(cached, reps), clock(recompute, reps), clock(forward_all, reps)
    print(f"{name:9s} cached step {t_cached * 1e3:8.2f} ms | recompute window {t_re * 1e3:8.2f} ms "
          f"({t_re / t_cached:5.1f}x) | full forward over window {t_fwd * 1e3:8.2f} ms ({t_fwd / t_cached:5.1f}x) "
          f"| max |diff| {gap:.1e}")


def cache_bytes(name: str, **config) -> int:
    model = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, window=200, **config)
    return kvcache.nbytes(model.init_state(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--history", type=int, default=200)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"serving step, batch {args.batch}, history {args.history}, W=200, CPU, 1 thread (median of {args.reps})")
    for name in ["sakt", "akt", "simplekt"]:
        bench(name, args.batch, args.history, args.reps)
    print("\ncached state per learner at W=200 (bytes)")
    for name in ["sakt", "akt", "simplekt"]:
        small = SMALL[name]
        print(f"{name:9s} default fp32 {cache_bytes(name):7d} | default fp16 "
              f"{cache_bytes(name, cache_dtype='float16'):7d} | time_decay fp32 {cache_bytes(name, time_decay=True):7d}"
              f" | small {cache_bytes(name, **small):6d} with {small}")


if __name__ == "__main__":
    main()
