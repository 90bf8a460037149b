"""Large synthetic event archives with a realistic shape, written column by column (no object per event).

The layout is the archiver's (``connectors/archive.py``): ``FOLDER/event_date=YYYY-MM-DD/part-*.parquet``
in ``ktstream.data.eventlog``'s Parquet schema. The shape follows EdNet KT1:

- learners' history lengths follow a power law (Pareto, exponent ``alpha``): most learners answer a few
  dozen questions, a few answer thousands;
- questions come in bundles (``step_id``) of 1-4 answered at one timestamp;
- a learner is active on some days: sessions start after gaps of about ``session_gap_days`` days and
  hold bundles about 40 s apart;
- items drift: the questions in use slide through the item bank over the archive's days, so ids first
  seen late in the archive are unknown to a vocabulary built before them;
- about a share ``duplicate_rate`` of the rows is written a second time, in runs, into a later file of the
  same date folder, as the at-least-once archiver does after a crash.

Learners are generated in blocks of about ``block_events`` events; each block is written as one file per
date folder, so memory is bounded by the block, not by the archive, and no learner spans two blocks'
files, as none spans two partitions of a keyed topic in the archiver's files.

>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> stats = write_synthetic_archive(root, 5_000, seed=1)
>>> stats["events"], stats["rows"] > stats["events"], stats["learners"] > 10
(5000, True, True)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ktstream.data.eventlog import PARQUET_SCHEMA

DAY_MS = 86_400_000
_DICTIONARY = ["learner_id", "item_id", "concept_ids", "response"]
START_MS = 1_546_300_800_000  # 2019-01-01T00:00:00Z


def history_lengths(n_events: int, rng: np.random.Generator, alpha: float = 1.2, minimum: int = 10,
                    maximum: int = 20_000) -> np.ndarray:
    """Power-law learner lengths (Pareto tail, clipped) that add up to exactly ``n_events``.

    >>> int(history_lengths(10_000, np.random.default_rng(0)).sum())
    10000
    """
    out, total = [], 0
    while total < n_events:
        draw = np.minimum((minimum * (1.0 - rng.random(max(16, (n_events - total) // 20))) ** (-1.0 / alpha))
                          .astype(np.int64), maximum)
        out.append(draw)
        total += int(draw.sum())
    lengths = np.concatenate(out)
    keep = int(np.searchsorted(np.cumsum(lengths), n_events))
    lengths = lengths[: keep + 1].copy()
    lengths[-1] -= int(lengths.sum()) - n_events
    return lengths[lengths > 0]


def _texts(prefix: str, numbers: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(prefix, pc.cast(pa.array(numbers), pa.string()), "")


def _block(lengths: np.ndarray, first_learner: int, first_event: int, first_bundle: int, days: int,
           n_items: int, n_concepts: int, session_gap_days: float, rng: np.random.Generator) -> tuple[pa.Table, int]:
    """One block of learners as a table (rows ordered by learner, then time), and the bundles it used."""
    n = int(lengths.sum())
    learner = np.repeat(np.arange(len(lengths)), lengths)  # (n,) learner of each event, block-local
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    pos = np.arange(n) - starts[learner]  # position within the learner's history
    # bundles of 1-4 questions sharing one timestamp; a new bundle also starts at each learner's first event
    new_bundle = (rng.random(n) < 0.45) | (pos == 0)
    bundle = np.cumsum(new_bundle) - 1
    # gaps between bundles: ~40 s inside a session, ~session_gap_days days between sessions
    new_session = new_bundle & (rng.random(n) < 0.04)
    gap = np.where(new_session, rng.exponential(session_gap_days * DAY_MS, n), rng.exponential(40_000.0, n))
    gap = np.where(new_bundle & (pos > 0), gap, 0.0).astype(np.int64)
    clock = np.cumsum(gap)
    clock -= clock[starts][learner]  # per-learner elapsed time since its first event
    span = days * DAY_MS
    first_ms = (rng.random(len(lengths)) * span * 0.9).astype(np.int64)
    times = START_MS + first_ms[learner] + clock % span  # a learner who outlives the archive wraps (rare)
    # item drift: the bank in use slides from the first item to the last over the archive's days
    day = (times - START_MS) // DAY_MS
    centre = (day * n_items) // max(days, 1)
    items = (centre + rng.zipf(1.6, n).clip(max=n_items // 4) * rng.choice([-1, 1], n)) % n_items
    ability = rng.normal(0.0, 1.0, len(lengths))[learner]
    difficulty = np.sin(items * 12.9898) * 1.5
    responses = (rng.random(n) < 1.0 / (1.0 + np.exp(difficulty - ability - 0.4))).astype(np.int16)
    k = 1 + (items % 3 == 0)  # one or two concepts per item
    second = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)  # 0 for an item's first concept, 1 next
    concept_values = (np.repeat(items % n_concepts, k) + 7 * second) % n_concepts
    offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int32)
    ids = first_event + np.arange(n)
    table = pa.table({
        "event_id": _texts("e", ids),
        "learner_id": _texts("u", first_learner + learner),
        "item_id": _texts("q", items),
        "concept_ids": pa.ListArray.from_arrays(pa.array(offsets), _texts("c", concept_values)),
        "response": pa.array(responses, pa.int16()),
        "event_time": pa.array(times, pa.int64()),
        "seq": pa.array(ids, pa.int64()),
        "step_id": _texts("b", first_bundle + bundle),
        "elapsed_ms": pa.array(rng.integers(2_000, 60_000, n), pa.int64()),
        "attributes": pa.nulls(n, pa.string()),
    }, schema=PARQUET_SCHEMA)
    return table, int(bundle[-1]) + 1 if n else 0


def _write_by_date(table: pa.Table, folder: Path, name: str, duplicate_rate: float,
                   rng: np.random.Generator) -> int:
    """One file per event date (rows in time order, as the archiver writes them); repeats in a later file."""
    times = table.column("event_time").to_numpy()
    day = (times // DAY_MS).astype(np.int64)
    order = np.lexsort((times, day))
    table, day = table.take(pa.array(order)), day[order]
    bounds = np.flatnonzero(np.diff(day)) + 1
    rows = 0
    for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(day)]])):
        date = np.datetime64(int(day[lo]), "D").astype(str)
        sub = folder / f"event_date={date}"
        sub.mkdir(parents=True, exist_ok=True)
        part = table.slice(int(lo), int(hi - lo))
        pq.write_table(part, sub / f"part-{name}.parquet", use_dictionary=_DICTIONARY)
        rows += part.num_rows
        if rng.random() < 0.1:  # a crash re-archives a run of rows: about a tenth of the files, in runs
            n = int(rng.binomial(part.num_rows, min(1.0, duplicate_rate * 10)))
            at = int(rng.integers(0, part.num_rows - n + 1))
            if n:
                pq.write_table(part.slice(at, n), sub / f"part-{name}-repeat.parquet", use_dictionary=_DICTIONARY)
                rows += n
    return rows


def write_synthetic_archive(folder: str | Path, n_events: int, seed: int = 0, days: int = 365,
                            n_items: int = 13_000, n_concepts: int = 190, alpha: float = 1.3,
                            session_gap_days: float = 3.0, duplicate_rate: float = 0.001,
                            block_events: int = 5_000_000) -> dict:
    """Write ``n_events`` distinct events (plus repeats) under ``folder``; returns counts.

    EdNet KT1 sizes by default: 13,000 questions on 190 concepts (tags).
    """
    folder = Path(folder)
    rng = np.random.default_rng(seed)
    lengths = history_lengths(n_events, rng)
    bounds = np.searchsorted(np.cumsum(lengths), np.arange(block_events, n_events, block_events), side="right")
    first_event = first_bundle = rows = 0
    first_learner = 0
    for b, part in enumerate(np.split(lengths, bounds)):
        if not len(part):
            continue
        table, bundles = _block(part, first_learner, first_event, first_bundle, days, n_items, n_concepts,
                                session_gap_days, rng)
        rows += _write_by_date(table, folder, f"{b:05d}", duplicate_rate, rng)
        first_event += table.num_rows
        first_bundle += bundles
        first_learner += len(part)
    return {"events": first_event, "rows": rows, "learners": len(lengths),
            "longest": int(lengths.max()), "median_length": float(np.median(lengths))}
