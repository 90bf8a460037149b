"""The prequential protocol's serving pass: every event predicted (``predict_stepwise``, the
per-event reference) against ``serve_prequential`` (the events before each learner's first scored
step applied without being predicted), both in one process on one data set's stream, with the
largest difference between their predictions at the scored events.

Models are untrained at their default sizes (the cost does not depend on the weights); vocabularies
come from the events before C1, as the protocol builds them. On shared cores compare the two passes
of one run only.

    python bench/prequential_pass.py --dataset cognitive_tutor_algebra_subset --models dkt,sakt
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from ktstream.cli.sources import load_stream, resolve
from ktstream.data.histories import build_vocabularies, collate, encode
from ktstream.evaluation.protocols import serve_prequential
from ktstream.models import create
from ktstream.models.stepwise import predict_stepwise


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="cognitive_tutor_algebra_subset")
    p.add_argument("--models", default="dkt,sakt")
    p.add_argument("--select-from", type=float, default=0.6)
    p.add_argument("--test-from", type=float, default=0.8)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    recs = load_stream(resolve(argparse.Namespace(dataset=args.dataset, data=None, events=None, format=None)))
    times = np.array([r["event_time"] for r in recs])
    c1, c0 = (int(np.quantile(times, q)) for q in (args.select_from, args.test_from))
    items, concepts = build_vocabularies([r for r in recs if r["event_time"] < c1])
    hs = encode(recs, items, concepts)
    scored = [h.times * 1000.0 >= c0 for h in hs]
    print(f"{args.dataset}: {len(hs)} learners, {len(recs)} events, {int(sum(s.sum() for s in scored))} scored")
    for name in [m for m in args.models.split(",") if m]:
        torch.manual_seed(0)
        model = create(name, n_items=len(items), n_concepts=len(concepts)).eval()
        started = time.perf_counter()
        reference, _ = predict_stepwise(model, collate(hs))
        per_event = time.perf_counter() - started
        started = time.perf_counter()
        fast = serve_prequential(model, hs, scored)
        served = time.perf_counter() - started
        diff = max(float(np.abs(fast[i][s] - reference[i, : len(h)].numpy()[s]).max())
                   for i, (h, s) in enumerate(zip(hs, scored)) if s.any())
        print(f"{name}: per-event {per_event:.1f} s, serve_prequential {served:.1f} s, "
              f"ratio {per_event / served:.1f}x, largest difference {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
