"""A small slice of real data for the gate tests: ASSISTments 2009 (AKT's fold 1), a few hundred learners.

Each split keeps its first learners in file order, each cut to its first
``max_len`` interactions (a data selection made per split, before anything
else); vocabularies come from the training slice only, as the protocol requires.
"""

from __future__ import annotations

from pathlib import Path

from ktstream.data.histories import build_vocabularies, encode
from ktstream.leakage import GateData


def first_learners(records, n_learners: int, max_len: int) -> list[dict]:
    kept: dict[str, list[dict]] = {}
    for r in records:
        rows = kept.get(r["learner_id"])
        if rows is None:
            if len(kept) == n_learners:
                continue
            rows = kept[r["learner_id"]] = []
        if len(rows) < max_len:
            rows.append(r)
    return [r for rows in kept.values() for r in rows]


def akt_slice(folder: Path, sizes=(240, 80, 160), max_len: int = 150, keep_repeated_rows: bool = False,
              fold: int = 1) -> GateData:
    from connectors.datasets.akt import akt_events

    parts = {}
    for part, n in zip(("train", "valid", "test"), sizes):
        events = akt_events(folder / f"assist2009_pid_{part}{fold}.csv", keep_repeated_rows=keep_repeated_rows)
        parts[part] = first_learners(events, n, max_len)
    items, concepts = build_vocabularies(parts["train"])
    train, valid, test = (encode(parts[p], items, concepts) for p in ("train", "valid", "test"))
    return GateData(train, valid, test, split="learner", n_items=len(items), n_concepts=len(concepts))
