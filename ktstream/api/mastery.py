"""A learner's mastery of each concept over the learner's history (the report's mastery curves, as data).

Row t of a ``Trajectory`` is the learner's mastery after t of its interactions (row 0: before any):
per concept, the mean predicted score (P(correct); ordinal: expected score / (K-1)) over the concept's
probe items, asked at the time of interaction t (ktstream.serving.mastery). Its last row is what
``Tracer.mastery`` gives after the tracer learned the same events. ``theta`` is the IRT ability where
the model's ``describe`` gives one.

>>> import ktstream, torch
>>> events = ktstream.simulate(n_learners=3, mean_length=8, seed=2)
>>> vocab = ktstream.Vocab.build(events)
>>> torch.manual_seed(0) and None
>>> model = ktstream.models.create("dkt", n_items=len(vocab.items), n_concepts=len(vocab.concepts), dim=8, hidden=8)
>>> traj = mastery_trajectory(model, vocab, events, "u0", concepts=["c1", "c4"])
>>> traj.values.shape == (len(traj.events) + 1, 2), traj.concepts
(True, ['c1', 'c4'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ktstream.api.bundle import Vocab, check_pair
from ktstream.api.events import frame, is_table, table_rows, to_records
from ktstream.data.histories import group_by_learner
from ktstream.models.base import KTModel
from ktstream.serving.mastery import mastery_curves


@dataclass(frozen=True)
class Trajectory:
    """``values`` (T+1, C): mastery of ``concepts`` before the learner's first event and after each of ``events``."""

    learner_id: str
    concepts: list[str]
    values: np.ndarray
    events: list[dict[str, Any]]
    theta: np.ndarray | None = None

    def now(self) -> dict[str, float]:
        """Mastery after the last event."""
        return dict(zip(self.concepts, self.values[-1].tolist()))

    def to_frame(self):
        """A pandas DataFrame indexed by position (events applied), one column per concept (``.plot()`` draws
        the curves)."""
        table = frame({c: self.values[:, j] for j, c in enumerate(self.concepts)})
        table.index.name = "position"
        return table


def mastery_trajectory(model: KTModel, vocab: Vocab, events: Any, learner_id: str,
                       concepts: Sequence[str] | None = None,
                       probes: dict[str, list[str]] | None = None) -> Trajectory:
    """The mastery trajectory of ``learner_id`` over its events among ``events`` (any form ``to_records`` reads).

    ``concepts``: those (default: the concepts of the learner's events that have probe items, most practised
    first); ``probes``: probe items per concept (default: ``vocab.probes``).
    """
    check_pair(model, vocab)
    rows = table_rows(events) if is_table(events) else events
    mine = to_records(r for r in rows if str(r["learner_id"]) == learner_id)
    history = group_by_learner(mine).get(learner_id)
    if not history:
        raise ValueError(f"no events of learner {learner_id!r}")
    probes = vocab.probes if probes is None else probes
    if concepts is None:
        practised: dict[str, int] = {}
        for r in history:
            for c in r.get("concept_ids") or ():
                practised[c] = practised.get(c, 0) + 1
        concepts = [c for c in sorted(practised, key=lambda c: -practised[c]) if probes.get(c)]
    missing = [c for c in concepts if not probes.get(c)]
    if missing or not concepts:
        raise ValueError(f"no probe items for concept(s) {missing[:5] or 'of this learner'}; give probes="
                         f"{{concept: [item ids]}}")
    values, theta = mastery_curves(model.eval(), vocab.items, vocab.concepts, history, {c: probes[c] for c in concepts})
    return Trajectory(learner_id, list(concepts), values, history, theta)
