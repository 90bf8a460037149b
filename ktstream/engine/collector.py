"""Garbage collection between micro-batches, in pauses as short as the young generation.

Almost everything the engine keeps is long-lived and acyclic: learner states, raw
windows, arena rows. Reference counting frees what it replaces; the cyclic
collector only ever finds garbage among fresh objects (a client's timeouts,
with their tracebacks). Left to CPython's schedule, the survivors fill the
older generations, and each older collection scans all of them: at 5,000
events/s over 30,000 learners, young collections grew to 20-30 ms and a
middle-generation collection took 54-185 ms every 10 s or so (docs/performance.md);
a full collection of the engine's heap at 30,000 learners takes about 0.3 s.

So, while the engine runs, automatic collection is off. Between micro-batches,
once ``young_objects`` tracked objects have accumulated since the last
collection, the collector collects them; every ``PROMOTE_EVERY``-th time it
collects the survivors of the previous ones too and freezes what is left
(``gc.freeze``: never scanned again). A pause is then bounded by the objects a
few micro-batches leave behind, wherever the heap is; the frozen heap is
collected only by a full collection. Objects that die in a cycle after being
frozen wait for it: kafka-python's poll timeouts (a ``KafkaTimeoutError``
whose traceback holds the frames that hold it, about 50 objects each) are the
ones seen, which is why survivors get a second collection before they are
frozen (most of those die within one). A full collection runs at the first
idle loop turn (a poll that returned nothing) once ``full_interval_s`` has
passed since the last; its pause grows with the heap (about 0.3 s for a DKT
engine of 30,000 learners: raw windows, plain tuples, leave the collector
before they are frozen; ktstream.core), and under a steady stream with
the odd empty poll it is such a pause once per interval. Right after a
rebalance the collector collects everything but the frozen objects: waiting
for the group leaves its garbage there (nothing is frozen before the first
assignment, while the join still holds it), and the group pauses anyway.
"""

from __future__ import annotations

import gc
import time


PROMOTE_EVERY = 4  # collections of the young objects per collection of their survivors, which are then frozen


class BatchCollector:
    def __init__(self, young_objects: int = 2000, full_interval_s: float = 600.0):
        assert young_objects > 0, f"young_objects must be positive, got {young_objects}"
        self.young_objects, self.full_interval_s = young_objects, full_interval_s
        self.started = False
        self._was_enabled = True
        self._last_full = time.monotonic()
        self.collections = 0

    def start(self) -> None:
        """Take over from the automatic collector: everything so far is collected once, then frozen."""
        if self.started:
            return
        self._was_enabled = gc.isenabled()
        gc.disable()
        self.started = True
        self.full()

    def between_batches(self, idle: bool = False, joined: bool = True) -> bool:
        """Collect if it is time to (``idle``: the loop's last poll returned nothing); True when it did.
        Until the engine has ``joined`` its group nothing is frozen: the join holds its garbage until
        it completes, and ``after_rebalance`` then finds it among the unfrozen objects."""
        if not self.started:
            return False
        if idle and time.monotonic() - self._last_full >= self.full_interval_s:
            self.full()
            return True
        if gc.get_count()[0] < self.young_objects:
            return False
        self.collections += 1
        if self.collections % PROMOTE_EVERY:
            gc.collect(0)  # the survivors move to generation 1, where the next collections find them again
        else:
            gc.collect(1)  # generation 1 holds nothing older than the last freeze
            if joined:
                gc.freeze()
        return True

    def after_rebalance(self) -> tuple[int, float]:
        """Collect every generation but the frozen one (a group join's garbage is all there), freeze the
        survivors; returns (unreachable objects, seconds)."""
        return self._collect(unfreeze=False)

    def full(self) -> tuple[int, float]:
        """A full collection, the frozen objects too once started; returns (unreachable objects, seconds).
        The interval to the next one counts from this one's end: a slow collection does not shorten it."""
        try:
            return self._collect(unfreeze=self.started)
        finally:
            self._last_full = time.monotonic()

    def _collect(self, unfreeze: bool) -> tuple[int, float]:
        start = time.perf_counter()
        if unfreeze:
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
