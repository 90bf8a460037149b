"""Serving cost and state per learner of every model family, in one run: compare's own measure.

`ktstream compare` times each run's serving path on its test split while other runs share the cores, so its
column ranks families only roughly. This runs the same measure (``ktstream.cli.compare.serving_cost``: the
first 500 interactions of the 64 longest test histories stepped through predict-then-update together) for
every family at its default size on one data set, untrained (trained weights cost the same), and prints
microseconds per event, the ratio to DKT's in the same run, and bytes of model state per learner.

    python bench/serving_cost.py --dataset assist2009_akt_pid --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ktstream.api import load_dataset  # noqa: E402
from ktstream.cli.compare import serving_cost  # noqa: E402
from ktstream.data.histories import build_vocabularies, encode  # noqa: E402
from ktstream.models import create  # noqa: E402
from ktstream.models.families import names  # noqa: E402


def test_histories(dataset: str):
    """(test histories, items, concepts), the vocabularies built from the training split as a trained model's."""
    data = load_dataset(dataset)
    items, concepts = build_vocabularies(data.train or data.events)
    return encode(data.test or data.events, items, concepts), items, concepts


def family_cost(family: str, histories, items, concepts, repeat: int) -> tuple[float, float]:
    """(median microseconds per event over ``repeat`` passes, state bytes per learner)."""
    torch.manual_seed(0)
    model = create(family, n_items=len(items), n_concepts=len(concepts))
    runs = [serving_cost(model, histories) for _ in range(repeat)]
    return statistics.median(us for us, _ in runs), runs[0][1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="assist2009_akt_pid")
    p.add_argument("--families", default=",".join(names()), help="comma-separated (default: every registered)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    histories, items, concepts = test_histories(args.dataset)
    families = [f for f in args.families.split(",") if f]
    cost = {f: family_cost(f, histories, items, concepts, args.repeat) for f in dict.fromkeys(["dkt", *families])}
    print(f"{args.dataset}: 64 longest test histories, first 500 interactions, {args.threads} thread(s), "
          f"median of {args.repeat}")
    for f in families:
        us, state = cost[f]
        print(f"{f:16s} {us:9.1f} us per event   {us / cost['dkt'][0]:6.2f} x dkt   {state:9,.0f} B state")


if __name__ == "__main__":
    main()
