"""The histories the model checks probe with: long enough, with steps and clocks, whatever the data.

A leak through a window boundary needs histories that cross it; a leak
through a step needs steps; a leak through time needs clocks. Public files
often have none of these (ASSISTments: no clocks, no steps, learners of a
few dozen interactions), so the probe builds them from the data given:

- length: learner i is ``length + 3 i`` positions long (``length`` crosses a
  windowed model's receptive field three times; the spread gives the batch
  padding). A learner shorter than that is continued by other learners of
  the pool, in a seeded order, each appended history re-based (step starts
  shifted, clocks moved after the previous end, event ids suffixed).
- steps: when no history of the data has a step of two or more positions,
  each position joins the step before with probability ``STEP_PROB`` (seeded);
  step mates then share the step's first event time.
- clocks: when the data has no event times, each learner starts at a seeded
  time and steps follow each other after exponential gaps (mean
  ``MEAN_GAP_S``), in whole seconds (the engine path carries milliseconds).

What was done is returned as notes for the report, with the seed.

>>> rng = np.random.default_rng(0)
>>> pool = [LearnerHistory(f"u{i}", np.full(5, 2), np.full((5, 1), 2), np.ones(5, int), np.full(5, np.nan),
...                        np.arange(5), [f"u{i}-{j}" for j in range(5)]) for i in range(3)]
>>> learners, notes = probe_histories(pool, 2, 12, seed=0)
>>> [len(h) for h in learners], notes["continued"], notes["steps"], notes["clocks"]
([12, 15], 2, 'synthesised (p=0.3, seed 0)', 'synthesised (mean gap 600 s, seed 0)')
>>> bool(np.all(np.diff(learners[0].times) >= 0)), len(set(learners[1].event_ids)) == 15
(True, True)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ktstream.data.histories import LearnerHistory

STEP_PROB = 0.3
MEAN_GAP_S = 600.0
LENGTH_SPREAD = 3  # learner i is length + LENGTH_SPREAD * i long


def has_steps(histories: Sequence[LearnerHistory]) -> bool:
    return any(bool(np.any(h.step_start != np.arange(len(h)))) for h in histories)


def has_clocks(histories: Sequence[LearnerHistory]) -> bool:
    return any(bool(np.isfinite(h.times).any()) for h in histories)


def _pad_concepts(c: np.ndarray, width: int) -> np.ndarray:
    return np.pad(c, ((0, 0), (0, width - c.shape[1])))


def _join(parts: list[LearnerHistory], learner_id: str) -> LearnerHistory:
    """Histories one after another as one learner's: step starts shifted, clocks continued, ids made unique."""
    width = max(p.concepts.shape[1] for p in parts)
    times, starts, ids, offset, last = [], [], [], 0, None
    for k, p in enumerate(parts):
        t = p.times.astype(np.float64)
        if last is not None and np.isfinite(t).any():
            t = t - np.nanmin(t) + last + 3600.0  # an hour after the previous history's end
        if np.isfinite(t).any():
            last = float(np.nanmax(t))
        times.append(t)
        starts.append(p.step_start + offset)
        ids += [f"{e or i}#{k}" for i, e in enumerate(p.event_ids)]
        offset += len(p)
    return LearnerHistory(learner_id, np.concatenate([p.items for p in parts]),
                          np.concatenate([_pad_concepts(p.concepts, width) for p in parts]),
                          np.concatenate([p.responses for p in parts]), np.concatenate(times),
                          np.concatenate(starts), ids)


def _with_steps(h: LearnerHistory, rng: np.random.Generator) -> LearnerHistory:
    joins = rng.random(len(h)) < STEP_PROB
    joins[0] = False
    starts = np.arange(len(h))
    for i in np.flatnonzero(joins):
        starts[i] = starts[i - 1]
    times = h.times[starts] if np.isfinite(h.times).any() else h.times  # step mates share a time
    return LearnerHistory(h.learner_id, h.items, h.concepts, h.responses, times, starts, h.event_ids)


def _with_clock(h: LearnerHistory, rng: np.random.Generator) -> LearnerHistory:
    first = h.step_start == np.arange(len(h))
    gaps = np.where(first, np.ceil(rng.exponential(MEAN_GAP_S, len(h))), 0.0)
    gaps[0] = 0.0
    times = 1.7e9 + float(rng.integers(0, 86_400 * 30)) + np.cumsum(gaps)
    return LearnerHistory(h.learner_id, h.items, h.concepts, h.responses, times, h.step_start, h.event_ids)


def probe_histories(pool: Sequence[LearnerHistory], n: int, length: int, seed: int
                    ) -> tuple[list[LearnerHistory], dict[str, Any]]:
    """``n`` sampled learners, each ``length + 3 i`` positions long, with steps and clocks; and notes."""
    pool = [h for h in pool if len(h) >= 2]
    assert pool, "the gate needs learners with at least 2 interactions"
    rng = np.random.default_rng(seed)
    picked = sorted(int(i) for i in rng.choice(len(pool), size=min(n, len(pool)), replace=False))
    steps, clocks = has_steps(pool), has_clocks(pool)
    out, continued = [], 0
    for rank, i in enumerate(picked):
        want = length + LENGTH_SPREAD * rank
        parts, have = [pool[i]], len(pool[i])
        others = [j for j in rng.permutation(len(pool)) if j != i] or [i]
        k = 0
        while have < want:
            nxt = pool[others[k % len(others)]]
            parts.append(nxt)
            have += len(nxt)
            k += 1
        continued += len(parts) > 1
        h = _join(parts, pool[i].learner_id) if len(parts) > 1 else pool[i]
        h = h.slice(0, want)
        if not steps:
            h = _with_steps(h, rng)
        if not clocks:
            h = _with_clock(h, rng)
        out.append(h)
    notes = {"learners": len(out), "lengths": f"{len(out[0])}..{len(out[-1])}", "continued": continued,
             "steps": "from the data" if steps else f"synthesised (p={STEP_PROB}, seed {seed})",
             "clocks": "from the data" if clocks else f"synthesised (mean gap {MEAN_GAP_S:.0f} s, seed {seed})"}
    return out, notes
