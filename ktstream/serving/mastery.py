"""Per-concept mastery, read off the serving path: how likely a learner is to succeed on a concept now.

No family exports per-concept mastery, so it is asked the way a platform would: the model predicts
(``predict``, which never mutates the state) the learner's score on every *probe item* of a concept,
and the concept's mastery is the mean over those items. The score is P(correct) for a binary model and
the expected score / (K-1) for an ordinal one (``expected_score``). Probe items are the items tagged
with the concept in a set of events, the most attempted first (``probe_items``).

``concept_mastery`` reads one state (a learner now); ``mastery_curves`` steps one learner's history
through ``update`` and reads the state before the first and after every interaction (the trajectory
the HTML report draws), with the IRT ability theta where ``describe`` gives one.

Letters: Q probe queries, C concepts, T interactions.

>>> probe_items([{"item_id": "q1", "concept_ids": ["add"]}, {"item_id": "q2", "concept_ids": ["add"]},
...              {"item_id": "q2", "concept_ids": ["add", "sub"]}])
{'add': ['q2', 'q1'], 'sub': ['q2']}
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

import numpy as np
import torch

from ktstream.data.histories import NO_RESPONSE, Interactions, collate, encode_learner
from ktstream.data.vocab import Vocabulary
from ktstream.models.base import KTModel, State, select_state


def expected_score(probs: torch.Tensor, n_categories: int) -> torch.Tensor:
    """(B,) score of (B, K) category probabilities: P(correct) for K = 2, expected score / (K-1) above."""
    if n_categories == 2:
        return probs[:, 1]
    return (probs * torch.arange(n_categories, dtype=probs.dtype)).sum(-1) / (n_categories - 1)


def probe_items(records: Iterable[dict], per_concept: int = 10,
                concepts: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Each concept's items in ``records``, most attempted first (ties: first seen), at most ``per_concept``;
    only ``concepts`` when given (a concept no record tags gets no probe)."""
    seen: dict[str, Counter] = {}
    for r in records:
        for c in r.get("concept_ids") or ():
            seen.setdefault(c, Counter())[r["item_id"]] += 1
    wanted = list(seen) if concepts is None else [c for c in concepts if c in seen]
    return {c: [i for i, _ in seen[c].most_common(per_concept)] for c in wanted}


class Probes:
    """The probe queries of concepts, encoded once: (Q,) items, (Q, 1) concepts, and each query's concept."""

    def __init__(self, items: Vocabulary, concepts: Vocabulary, probes: dict[str, list[str]]):
        empty = [c for c, its in probes.items() if not its]
        assert not empty, f"every concept needs at least one probe item; none for {empty}"
        self.names = list(probes)
        pairs = [(c, i) for c in self.names for i in probes[c]]
        Q = len(pairs)
        self.query = Interactions(torch.tensor([items.encode(i) for _, i in pairs], dtype=torch.long).reshape(Q),
                                  torch.tensor([[concepts.encode(c)] for c, _ in pairs], dtype=torch.long
                                               ).reshape(Q, 1),
                                  torch.full((Q,), NO_RESPONSE), torch.full((Q,), math.nan, dtype=torch.float64))
        self.owner = torch.tensor([self.names.index(c) for c, _ in pairs], dtype=torch.long).reshape(Q)
        self.per_concept = torch.bincount(self.owner, minlength=len(self.names)).double()

    def __len__(self) -> int:
        return len(self.owner)

    @torch.inference_mode()
    def read(self, model: KTModel, state: State, time_s: float = math.nan,
             describe: bool = False) -> tuple[np.ndarray, float | None]:
        """(C,) mean probe score per concept for the learner in ``state`` (leading dim 1), asked at ``time_s``
        (epoch seconds, NaN: no clock); with ``describe``, also theta averaged over the probes (None where the
        model gives none)."""
        self.query.times.fill_(time_s)
        wide = select_state(state, torch.zeros(len(self), dtype=torch.long))  # the learner's state, once per probe
        if describe:
            probs, info = model.predict(wide, self.query, describe=True)
        else:
            probs, info = model.predict(wide, self.query), {}
        score = expected_score(probs, model.n_categories).double()
        mastery = torch.zeros(len(self.names), dtype=torch.float64).index_add_(0, self.owner, score) / self.per_concept
        theta = float(info["theta"].reshape(len(self), -1)[:, 0].mean()) if "theta" in info else None
        return mastery.numpy(), theta


def concept_mastery(model: KTModel, state: State, items: Vocabulary, concepts: Vocabulary,
                    probes: dict[str, list[str]], time_s: float = math.nan) -> dict[str, float]:
    """Mastery of each concept of ``probes`` for the learner in ``state`` (leading dim 1), asked at ``time_s``."""
    values, _ = Probes(items, concepts, probes).read(model, state, time_s)
    return dict(zip(probes, values.tolist()))


@torch.inference_mode()
def mastery_curves(model: KTModel, items: Vocabulary, concepts: Vocabulary, learner: list[dict],
                   probes: dict[str, list[str]]) -> tuple[np.ndarray, np.ndarray | None]:
    """(T+1, C) mastery per concept after 0..T of ``learner``'s interactions (records in the learner's order),
    and theta (T+1,) where ``describe`` gives one. Row t is asked at the time of interaction t (the last row at
    the last interaction's)."""
    hist = collate([encode_learner(learner[0]["learner_id"], learner, items, concepts)])
    reader = Probes(items, concepts, probes)
    T = hist.shape[1]
    state, rows, thetas = model.init_state(1), [], []
    for t in range(T + 1):
        if t > 0 and int(hist.responses[0, t - 1]) >= 0:
            state = model.update(state, hist.at(t - 1))
        values, theta = reader.read(model, state, float(hist.times[0, min(t, T - 1)]), describe=True)
        rows.append(values)
        if theta is not None:
            thetas.append(theta)
    return np.stack(rows), (np.array(thetas) if len(thetas) == len(rows) else None)
