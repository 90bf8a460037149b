"""Garbage collection between micro-batches, in pauses as short as the young generation.

Almost everything the engine keeps is long-lived and acyclic: learner states, raw
windows, arena rows. Reference counting frees what it replaces; the cyclic
collector only ever finds garbage among fresh objects (a client's timeouts,
with their tracebacks). Left to CPython's schedule, the survivors fill the
older generations, and each older collection scans all of them: at 5,000
events/s over 30,000 learners, young collections grew from 2 to 25 ms and a
middle-generation collection took 55-135 ms every 10 s (docs/engine.md,
twelfth round); a full collection of that heap takes about 0.7 s.

So, while the engine runs, automatic collection is off. Between micro-batches,
once ``young_objects`` tracked objects have accumulated since the last
collection, the collector collects them (cyclic garbage found there is freed)
and freezes the survivors (``gc.freeze``: never scanned again). A pause is then
bounded by the objects a few micro-batches leave behind, wherever the heap is.
What a frozen object drops into a cycle later is found only by a full
collection: the engine runs one right after a rebalance, in a pause the group
already takes (``full``).
"""

from __future__ import annotations

import gc
import time


class BatchCollector:
    def __init__(self, young_objects: int = 2000):
        assert young_objects > 0, f"young_objects must be positive, got {young_objects}"
        self.young_objects = young_objects
        self.started = False
        self._was_enabled = True
        self.collections = 0

    def start(self) -> None:
        """Take over from the automatic collector: everything so far is collected once, then frozen."""
        if self.started:
            return
        self._was_enabled = gc.isenabled()
        gc.disable()
        gc.collect()
        gc.freeze()
        self.started = True

    def between_batches(self) -> bool:
        """Collect the objects made since the last collection, if enough are; True when it collected."""
        if not self.started or gc.get_count()[0] < self.young_objects:
            return False
        gc.collect(1)  # generation 1 holds nothing older than the last freeze
        gc.freeze()
        self.collections += 1
        return True

    def full(self) -> tuple[int, float]:
        """A full collection (the frozen objects too, once started); returns (unreachable objects, seconds)."""
        start = time.perf_counter()
        if self.started:
            gc.unfreeze()
        found = gc.collect()
        if self.started:
            gc.freeze()
        return found, time.perf_counter() - start

    def stop(self) -> None:
        """Hand the process back to the automatic collector (frozen objects become collectable again)."""
        if not self.started:
            return
        self.started = False
        gc.unfreeze()
        if self._was_enabled:
            gc.enable()
