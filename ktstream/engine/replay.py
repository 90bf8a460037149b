"""Publishing a canonical event log as a live stream: per-learner order, a chosen rate, optional re-timing.

Order: each learner's events in event-time order (ties: the source's order;
ktstream.data.histories.group_by_learner), learners merged by event time, or
interleaved one event each in turn when the log has no clock. Events are keyed
by learner id, so each learner's stream stays on one partition (invariant 3).

``retime=True`` replaces every event time by the wall-clock time of
publishing, keeping steps (a learner's events that shared an event time
share the new one) and strict order otherwise, so end-to-end latency
(event time -> prediction) is meaningful when an old log is replayed.

>>> recs = [{"event_id": "a2", "learner_id": "a", "item_id": "q", "event_time": 30},
...         {"event_id": "b1", "learner_id": "b", "item_id": "q", "event_time": 20},
...         {"event_id": "a1", "learner_id": "a", "item_id": "q", "event_time": 10}]
>>> [r["event_id"] for r in replay_order(recs)]
['a1', 'b1', 'a2']
"""

from __future__ import annotations

import heapq
import json
import time
from typing import Any, Iterable, Iterator

from tqdm import tqdm

from ktstream.core import Output
from ktstream.data.histories import group_by_learner
from ktstream.engine.records import Sink


def replay_order(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    per_learner = list(group_by_learner(records).values())
    if all(r.get("event_time") is not None for recs in per_learner for r in recs):
        streams = [[(r["event_time"], i, j, r) for j, r in enumerate(recs)] for i, recs in enumerate(per_learner)]
        return [x[-1] for x in heapq.merge(*streams)]
    depth = max((len(recs) for recs in per_learner), default=0)
    return [recs[j] for j in range(depth) for recs in per_learner if j < len(recs)]


class Retimer:
    """Event time := publishing time, steps kept, strictly increasing per learner otherwise."""

    def __init__(self):
        self._last: dict[str, tuple[Any, int]] = {}  # learner -> (original step key, new time)

    def __call__(self, rec: dict[str, Any], now_ms: int) -> dict[str, Any]:
        lid = rec["learner_id"]
        key = rec.get("step_id") or rec.get("event_time")
        prev = self._last.get(lid)
        if prev is not None and key is not None and prev[0] == key:
            new = prev[1]
        else:
            new = max(now_ms, prev[1] + 1) if prev is not None else now_ms
        self._last[lid] = (key, new)
        return {**rec, "event_time": new}


def publish(records: list[dict[str, Any]], sink: Sink, topic: str, rate: float | None = None,
            retime: bool = False, chunk: int = 50, progress: bool = True) -> Iterator[int]:
    """Send ``records`` in order at ``rate`` events/s (None: as fast as possible); yields the count sent.

    The sink is flushed every chunk when paced (so events leave at the offered rate) and at the end.
    """
    assert rate is None or rate > 0, f"rate must be positive, got {rate}"
    retimer = Retimer() if retime else None
    started = time.perf_counter()
    bar = tqdm(total=len(records), unit="ev", disable=not progress, desc=f"replay -> {topic}")
    sent = 0
    for i in range(0, len(records), chunk):
        if rate is not None:
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        part = records[i : i + chunk]
        now = time.time_ns() // 1_000_000
        if retimer is not None:
            part = [retimer(r, now) for r in part]
        sink.send(Output(topic, r["learner_id"].encode(), json.dumps(r, separators=(",", ":")).encode())
                  for r in part)
        if rate is not None:
            sink.flush(30.0)
        sent += len(part)
        bar.update(len(part))
        yield sent
    sink.flush(60.0)
    bar.close()
