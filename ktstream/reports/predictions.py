"""Per-prediction data for a report: one row per scored interaction, recomputed or read from Parquet.

An evaluation's results.json holds summary figures only; the reliability
diagram, AUC over event time and per-learner plots need every prediction. They
are recomputed here from the selected model (a checkpoint) and the test events,
through the training path, which the contract tests hold equal to serving
(invariant 2), so each row is the prequential prediction the engine would have
made. ``save`` / ``load`` keep them as ``predictions.parquet`` beside results.json.

Letters: N predictions, K response categories.

>>> import torch
>>> from ktstream.data.simulate import simulate
>>> from ktstream.data.histories import build_vocabularies
>>> from ktstream.models import create
>>> recs = simulate(n_learners=3, mean_length=6, seed=1)
>>> items, concepts = build_vocabularies(recs)
>>> _ = torch.manual_seed(0)
>>> m = create("dkt", n_items=len(items), n_concepts=len(concepts), dim=4, hidden=4)
>>> p = recompute(m, items, concepts, recs)
>>> len(p) == sum(r.get("response") is not None for r in recs), p.probs.shape[1]
(True, 2)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ktstream.data.histories import encode_learner, group_by_learner
from ktstream.data.vocab import Vocabulary
from ktstream.models.base import KTModel
from ktstream.training.trainer import predict_histories


@dataclass
class Predictions:
    """Columns of equal length N; ``probs`` is (N, K), ``times`` epoch seconds (NaN: no clock)."""

    learner_ids: np.ndarray  # (N,) str
    positions: np.ndarray  # (N,) 1-based position in the learner's history
    times: np.ndarray  # (N,) float64 seconds
    item_ids: np.ndarray  # (N,) str
    responses: np.ndarray  # (N,) int, 0..K-1
    probs: np.ndarray  # (N, K)

    def __post_init__(self) -> None:
        n = len(self.responses)
        for f in fields(self):
            assert len(getattr(self, f.name)) == n, f"column {f.name} has {len(getattr(self, f.name))} rows, not {n}"
        assert self.probs.ndim == 2 and self.probs.shape[1] >= 2, f"probs must be (N, K>=2), got {self.probs.shape}"

    def __len__(self) -> int:
        return len(self.responses)

    @property
    def n_categories(self) -> int:
        return int(self.probs.shape[1])

    @property
    def p_correct(self) -> np.ndarray:
        """P(response >= 1): the binary figure, also for ordinal models (as the evaluation tables use)."""
        return 1.0 - self.probs[:, 0]

    @property
    def correct(self) -> np.ndarray:
        return (self.responses >= 1).astype(np.int64)

    @property
    def has_times(self) -> bool:
        return bool(np.isfinite(self.times).any())

    def select(self, rows: np.ndarray) -> "Predictions":
        """The rows where the boolean mask ``rows`` holds (e.g. the test window of a prequential run)."""
        return Predictions(*(getattr(self, f.name)[rows] for f in fields(self)))

    def save(self, path: str | Path) -> Path:
        cols: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "probs"}
        for k in range(self.n_categories):
            cols[f"p{k}"] = self.probs[:, k]
        pq.write_table(pa.table(cols), str(path))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "Predictions":
        t = pq.read_table(str(path)).to_pydict()
        K = sum(1 for name in t if name.startswith("p") and name[1:].isdigit())
        probs = np.stack([np.asarray(t[f"p{k}"], dtype=np.float64) for k in range(K)], axis=1)
        return cls(np.asarray(t["learner_ids"], dtype=object), np.asarray(t["positions"], dtype=np.int64),
                   np.asarray(t["times"], dtype=np.float64), np.asarray(t["item_ids"], dtype=object),
                   np.asarray(t["responses"], dtype=np.int64), probs)


def recompute(model: KTModel, items: Vocabulary, concepts: Vocabulary, records: Sequence[dict],
              batch_size: int = 64) -> Predictions:
    """Prequential predictions of ``model`` for every interaction with a response in ``records``."""
    grouped = group_by_learner(records)  # the order encode() uses, so row i of a learner is its record i
    assert grouped, "no learners in the events given to the report"
    histories = [encode_learner(lid, grouped[lid], items, concepts) for lid in sorted(grouped)]
    probs = predict_histories(model.cpu().eval(), histories, batch_size, "cpu")
    cols: dict[str, list] = {k: [] for k in ("lid", "pos", "time", "item", "resp", "probs")}
    for h, p in zip(histories, probs):
        keep = np.flatnonzero(h.responses >= 0)
        names = [r["item_id"] for r in grouped[h.learner_id]]
        cols["lid"] += [h.learner_id] * len(keep)
        cols["pos"].append(keep + 1)
        cols["time"].append(h.times[keep])
        cols["item"] += [names[i] for i in keep]
        cols["resp"].append(h.responses[keep])
        cols["probs"].append(p[keep])
    return Predictions(np.asarray(cols["lid"], dtype=object), np.concatenate(cols["pos"]),
                       np.concatenate(cols["time"]), np.asarray(cols["item"], dtype=object),
                       np.concatenate(cols["resp"]), np.concatenate(cols["probs"]).astype(np.float64))
