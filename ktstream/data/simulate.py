"""A small synthetic learner population, so demos and tests need no downloaded data.

Each item tests one or two concepts and has a difficulty; each learner has a
general ability plus a per-concept offset, and learns: every attempt raises
the ability on the item's concepts (more after a correct answer). The
response is correct with probability sigmoid(ability on the item's concepts -
difficulty), a Rasch-style model with practice, so a sequence model has
something real to learn (which concepts a learner has practised, how well).

Records are canonical events (``Event.to_record()`` form, event_time in epoch
ms) in per-learner event-time order. Some attempts share the previous one's
event time (a step, invariant 1); ``query_prob`` adds prediction-only events.

>>> recs = simulate(n_learners=3, mean_length=5, seed=1)
>>> sorted(recs[0])
['concept_ids', 'event_id', 'event_time', 'item_id', 'learner_id', 'response']
>>> len({r["learner_id"] for r in recs})
3
"""

from __future__ import annotations

from typing import Any

import numpy as np


def simulate(n_learners: int = 300, n_items: int = 100, n_concepts: int = 10, mean_length: int = 60,
             seed: int = 0, start_ms: int = 1_700_000_000_000, step_prob: float = 0.1,
             query_prob: float = 0.0, learning_rate: float = 0.15, id_prefix: str = "u",
             world_seed: int = 0, start_spread_ms: int = 86_400_000,
             mean_gap_ms: float = 90_000.0) -> list[dict[str, Any]]:
    """Simulated canonical events of ``n_learners`` learners (list of record dicts).

    ``world_seed`` fixes the items (difficulty, concepts) and ``seed`` the learners,
    so a model trained on one population can serve another of the same world.
    Learners start within ``start_spread_ms`` of ``start_ms``: a short spread makes
    many learners active at once, as on a live platform (what the engine is built for).
    """
    assert n_learners > 0 and n_items > 0 and n_concepts > 0, "need at least one learner, item and concept"
    world = np.random.default_rng(world_seed)
    difficulty = world.normal(0.0, 1.0, n_items)
    item_concepts = [world.choice(n_concepts, size=1 + int(world.random() < 0.3), replace=False)
                     for _ in range(n_items)]
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for u in range(n_learners):
        ability = rng.normal(0.0, 1.0) + rng.normal(0.0, 0.5, n_concepts)
        length = max(2, int(rng.poisson(mean_length)))
        t = start_ms + int(rng.integers(0, max(start_spread_ms, 1)))
        lid = f"{id_prefix}{u}"
        for i in range(length):
            if i == 0 or rng.random() >= step_prob:
                t += int(rng.exponential(mean_gap_ms)) + 1  # a new step; otherwise share the time
            q = int(rng.integers(n_items))
            cs = item_concepts[q]
            rec: dict[str, Any] = {"event_id": f"{lid}-{i}", "learner_id": lid, "item_id": f"q{q}",
                                   "concept_ids": [f"c{c}" for c in cs], "event_time": t}
            if rng.random() >= query_prob:
                p = 1.0 / (1.0 + np.exp(-(ability[cs].mean() - difficulty[q])))
                correct = int(rng.random() < p)
                rec["response"] = correct
                ability[cs] += learning_rate * (1.0 if correct else 0.5)
            out.append(rec)
    return out
