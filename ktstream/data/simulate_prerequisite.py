"""Learners whose answer at t depends on one earlier interaction d steps back: attention with a ground truth.

Items come in pairs (a prerequisite item and its dependent item, sharing one concept of their own) and
as fillers (a Rasch-style population as in `simulate`). In each learner's sequence some prerequisite
items are placed at position p and their dependent item at p + d, d drawn from ``distances``; each pair
occurs at most once per learner, so the interaction the dependent answer hangs on is unique. The
dependent response copies the prerequisite's with probability ``fidelity`` (else its opposite), so a
predictor that reads position p scores AUC about ``fidelity`` there and nothing else in the sequence helps.

`PrerequisiteData.truth` maps a dependent event's id to (position of its prerequisite, distance d),
positions 0-based in the learner's sequence (every event is its own step: times strictly increase).

>>> data = simulate_prerequisite(n_learners=2, length=30, distances=(1, 5), seed=0)
>>> eid, (pos, d) = next(iter(data.truth.items()))
>>> recs = {r["event_id"]: r for r in data.records}
>>> recs[eid]["item_id"].startswith("d"), d in (1, 5)
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

#: distances of the study: 1 to 200 interactions back
DISTANCES = (1, 2, 5, 10, 20, 50, 100, 200)


@dataclass
class PrerequisiteData:
    """Canonical records (per-learner event-time order) and the ground truth of every dependent event."""

    records: list[dict[str, Any]]
    truth: dict[str, tuple[int, int]] = field(default_factory=dict)  # event id -> (prerequisite position, d)


def simulate_prerequisite(n_learners: int = 200, length: int = 240, distances: Sequence[int] = DISTANCES,
                          pairs_per_learner: int = 12, n_pairs: int = 40, n_fillers: int = 60,
                          fidelity: float = 0.9, seed: int = 0, world_seed: int = 0,
                          start_ms: int = 1_700_000_000_000, id_prefix: str = "p") -> PrerequisiteData:
    """``n_learners`` sequences of ``length`` interactions with up to ``pairs_per_learner`` prerequisite pairs.

    ``world_seed`` fixes item difficulties; ``seed`` the learners. Every distance needs
    ``length > max(distances)``.
    """
    assert length > max(distances), f"length ({length}) must exceed the largest distance ({max(distances)})"
    assert 0.5 <= fidelity <= 1.0, "fidelity is the chance the dependent answer copies the prerequisite's"
    assert pairs_per_learner <= n_pairs, "each pair occurs at most once per learner"
    world = np.random.default_rng(world_seed)
    filler_difficulty = world.normal(0.0, 1.0, n_fillers)
    prereq_difficulty = world.normal(0.0, 1.0, n_pairs)
    rng = np.random.default_rng(seed)
    out = PrerequisiteData([])
    for u in range(n_learners):
        lid, ability = f"{id_prefix}{u}", rng.normal(0.0, 1.0)
        slots: list[tuple[str, int] | None] = [None] * length  # ("p" | "d", pair) per position
        for j in rng.permutation(n_pairs)[:pairs_per_learner]:
            d = int(rng.choice(distances))
            free = [p for p in range(length - d) if slots[p] is None and slots[p + d] is None]
            if free:
                p = int(rng.choice(free))
                slots[p], slots[p + d] = ("p", int(j)), ("d", int(j))
        t = start_ms + int(rng.integers(0, 86_400_000))
        answered: dict[int, tuple[int, int]] = {}  # pair -> (position, response)
        for i, slot in enumerate(slots):
            t += int(rng.exponential(60_000)) + 1  # strictly increasing: every event its own step
            rec: dict[str, Any] = {"event_id": f"{lid}-{i}", "learner_id": lid, "event_time": t}
            if slot is None:
                q = int(rng.integers(n_fillers))
                y = int(rng.random() < 1 / (1 + np.exp(-(ability - filler_difficulty[q]))))
                rec.update(item_id=f"f{q}", concept_ids=[f"cf{q % 10}"], response=y)
            elif slot[0] == "p":
                j = slot[1]
                y = int(rng.random() < 1 / (1 + np.exp(-(ability - prereq_difficulty[j]))))
                answered[j] = (i, y)
                rec.update(item_id=f"p{j}", concept_ids=[f"cp{j}"], response=y)
            else:
                j = slot[1]
                p, y_p = answered[j]
                y = y_p if rng.random() < fidelity else 1 - y_p
                rec.update(item_id=f"d{j}", concept_ids=[f"cp{j}"], response=y)
                out.truth[rec["event_id"]] = (p, i - p)
            out.records.append(rec)
    return out
