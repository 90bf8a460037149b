"""The micro-batcher: one polled batch -> waves in which every learner appears at most once.

A learner's events keep their arrival order (one partition holds a learner's
whole stream, invariant 3), so wave i holds the i-th kept event of every
learner in the batch and waves run one after another. Before that, each
learner's events are screened in order:

- redeliveries (source offset at or below the last applied one on that
  partition: after a rebalance or a retried batch) are skipped: their
  prediction or dead letter was committed the first time;
- repeated events (the event id of an event the learner has applied, now at
  a new offset: a producer that sent it twice) are rejected as duplicates
  (reason ``duplicate``) without touching the state. "Applied" means: in the
  learner's raw window (``engine.rebuild_window`` records; with a window of 0,
  the last applied event only) or kept earlier in this micro-batch. The rule
  reads only the committed state and the batch, so it gives the same answer
  however the stream is cut into micro-batches. An event whose time is after
  every applied event's cannot repeat one of them, so the window is searched
  only for events at or before the learner's latest time (or without one);
- late events (event time older than the latest applied one) follow the late
  policy: ``dead-letter`` rejects them (reason ``late``), ``apply`` keeps them
  with ``late=True`` on their prediction. Events without an event time are
  never late: their order is their arrival order.

>>> from ktstream.core import LearnerState, Record
>>> from ktstream.engine.decode import decode
>>> def ev(lid, off, t):
...     body = '{"event_id":"e%d","learner_id":"%s","item_id":"q","event_time":%d}' % (off, lid, t)
...     return decode(Record("ev", 0, off, lid.encode(), body.encode()), 10_000)
>>> learners = {u: LearnerState(u, {}, "v") for u in ["a", "b"]}
>>> p = plan([ev("a", 0, 10), ev("b", 1, 10), ev("a", 2, 5), ev("a", 3, 20)], learners, "dead-letter")
>>> [[x.decoded.record.offset for x in w] for w in p.waves], [d.record.offset for d in p.late]
([[0, 1], [3]], [2])
>>> again = Record("ev", 0, 4, b"a", b'{"event_id":"e3","learner_id":"a","item_id":"q","event_time":20}')
>>> [d.record.offset for d in plan([ev("a", 3, 20), decode(again, 10_000)], learners, "dead-letter").repeated]
[4]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ktstream.core import W_EVENT_ID, LearnerState
from ktstream.engine.decode import Decoded

LatePolicy = Literal["dead-letter", "apply"]
LATE_POLICIES = ("dead-letter", "apply")


@dataclass(slots=True)
class Planned:
    """One event scheduled in a wave, with the learner's working state and its late flag."""

    decoded: Decoded
    learner: LearnerState
    late: bool = False


@dataclass
class Plan:
    waves: list[list[Planned]] = field(default_factory=list)
    late: list[Decoded] = field(default_factory=list)  # rejected as late (dead-letter policy)
    late_applied: int = 0
    duplicates: list[Decoded] = field(default_factory=list)  # redelivered offsets, skipped
    repeated: list[Decoded] = field(default_factory=list)  # the last applied event id again, rejected


def events_per_learner(decoded: list[Decoded]) -> dict[str, list[Decoded]]:
    """Events per learner, in arrival order (dicts keep first-seen learner order)."""
    out: dict[str, list[Decoded]] = {}
    for d in decoded:
        out.setdefault(d.event.learner_id, []).append(d)
    return out


def applied_before(d: Decoded, learner: LearnerState) -> bool:
    """Whether the learner's committed state already holds an event with ``d``'s event id."""
    eid, last = d.event.event_id, learner.last_event_time_ms
    if eid == learner.last_event_id:
        return True
    if d.event_time_ms is not None and last is not None and d.event_time_ms > last:
        return False  # after every applied event: no repeat of one
    return any(r[W_EVENT_ID] == eid for r in learner.window)


def plan(decoded: list[Decoded], learners: dict[str, LearnerState], late_policy: LatePolicy) -> Plan:
    """Screen each learner's events (redeliveries, repeats, lateness) and lay the kept ones out in waves."""
    assert late_policy in LATE_POLICIES, f"late_policy must be one of {LATE_POLICIES}, got {late_policy!r}"
    result = Plan()
    kept: list[list[Planned]] = []
    for lid, events in events_per_learner(decoded).items():
        learner = learners[lid]
        last_time, last_offset, batch_ids = learner.last_event_time_ms, dict(), set()
        if learner.partition is not None:
            last_offset[learner.partition] = learner.last_offset
        seq: list[Planned] = []
        for d in events:
            rec = d.record
            if rec.offset <= last_offset.get(rec.tp, -1):
                result.duplicates.append(d)
                continue
            if d.event.event_id in batch_ids or applied_before(d, learner):
                result.repeated.append(d)
                continue
            late = d.event_time_ms is not None and last_time is not None and d.event_time_ms < last_time
            if late and late_policy == "dead-letter":
                result.late.append(d)
                continue
            result.late_applied += int(late)
            seq.append(Planned(d, learner, late))
            last_offset[rec.tp] = rec.offset
            batch_ids.add(d.event.event_id)
            if d.event_time_ms is not None and (last_time is None or d.event_time_ms > last_time):
                last_time = d.event_time_ms
        if seq:
            kept.append(seq)
    depth = max((len(s) for s in kept), default=0)
    result.waves = [[s[i] for s in kept if i < len(s)] for i in range(depth)]
    return result
