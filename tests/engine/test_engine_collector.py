"""The engine's garbage collection between micro-batches (ktstream.engine.collector): cyclic garbage
is still freed, a collection scans what the last micro-batches made and never the long-lived heap,
and closing the engine hands the process back to the automatic collector."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from ktstream.core import LearnerState
from ktstream.engine.collector import PROMOTE_EVERY, BatchCollector


class Cycle:
    pass


def cycle(freed: list) -> None:
    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    weakref.finalize(a, freed.append, 1)


def test_collections_between_batches_free_cycles_and_never_rescan_the_long_lived_heap(kit):
    recs = kit.stream(n_learners=40, mean_length=25, seed=4)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, sink = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                             kit.as_records(recs), max_batch=20)
    engine.collector = collector = BatchCollector(young_objects=300)
    was_enabled = gc.isenabled()
    old_heap = [[i] for i in range(50_000)]  # long-lived tracked objects, as a large cache would hold
    scanned: list[tuple[int, int]] = []  # (generation, objects it scans) per collection
    freed: list = []
    seen: dict = {"turns": 0}

    def count_scanned(phase: str, info: dict) -> None:
        if phase == "start":
            scanned.append((info["generation"], sum(len(gc.get_objects(generation=g))
                                                    for g in range(info["generation"] + 1))))

    def turn() -> bool:
        """Called by run() before each step: cyclic garbage, and the checks, between micro-batches."""
        if seen["turns"]:
            assert not gc.isenabled(), "automatic collection runs while the engine serves"
        seen["turns"] += 1
        cycle(freed)
        if source.pending:
            return False
        if "served" not in seen:  # collect at every turn from now on ...
            seen["served"], collector.young_objects = collector.collections, 1
            return False
        if collector.collections % PROMOTE_EVERY:  # ... up to the next collection that freezes survivors
            assert collector.collections < seen["served"] + 2 * PROMOTE_EVERY, "no collection froze survivors"
            return False
        cached = {id(engine.cache.peek(lid)) for lid in engine.cache.keys()}
        seen["cached"] = len(cached)
        seen["unfrozen"] = [o for o in gc.get_objects() if isinstance(o, LearnerState) and id(o) in cached]
        return True

    gc.callbacks.append(count_scanned)
    try:
        engine.run(threading.Event(), until=turn)
    finally:
        gc.callbacks.remove(count_scanned)
        engine.close()
    assert gc.isenabled() == was_enabled and gc.get_freeze_count() == 0, "the collector was handed back"
    every_generation = [n for generation, n in scanned if generation == 2]
    young = [n for generation, n in scanned if generation < 2]
    assert len(every_generation) == 2, "collections of every generation: when the engine takes over (the " \
                                       "frozen one too), and after the first assignment"
    assert seen["served"] >= 3 and len(young) == collector.collections
    made = seen["turns"]
    assert len(freed) >= made - 3, f"cyclic garbage made while serving was not freed: {len(freed)} of {made}"
    assert max(young) < 3_000 < len(old_heap), f"a collection scanned the long-lived heap: {scanned}"
    assert seen["cached"] == 40 and seen["unfrozen"] == [], "the cached learner states are still scanned"
    assert len(sink.flushed) == len(recs)


def test_cycles_among_frozen_objects_are_freed_at_the_first_idle_turn_after_the_interval():
    collector = BatchCollector(young_objects=10**9, full_interval_s=0.5)
    was_enabled = gc.isenabled()
    freed: list = []
    try:
        collector.start()
        a, b = Cycle(), Cycle()
        a.other, b.other = b, a
        weakref.finalize(a, freed.append, 1)
        gc.collect(1)
        gc.freeze()  # as a collection between micro-batches leaves a survivor
        del a, b  # ... which then drops into a cycle (a kafka-python timeout's traceback, say)
        assert not collector.between_batches(idle=True), "a full collection before the interval"
        time.sleep(0.6)
        assert not collector.between_batches(idle=False) and freed == [], "a full collection while busy"
        assert collector.between_batches(idle=True) and freed == [1]
        assert gc.get_freeze_count() > 0, "the survivors of the full collection are frozen again"
        assert not collector.between_batches(idle=True), "the interval starts again"
    finally:
        collector.stop()
    assert gc.isenabled() == was_enabled and gc.get_freeze_count() == 0


def test_nothing_is_frozen_while_the_group_is_joining(kit):
    """A join's garbage stays alive until the join completes: collections between micro-batches
    freeze nothing before the first assignment, whose collection then frees all of it."""
    from ktstream.engine import MemorySource

    class Joining(MemorySource):
        def __init__(self, records, polls_before_joined):
            super().__init__(records)
            self.polls_before_joined = polls_before_joined

        def poll(self, timeout_s, max_records):
            if self.polls_before_joined:
                self.polls_before_joined -= 1
                return []
            return super().poll(timeout_s, max_records)

    recs = kit.stream(n_learners=5, mean_length=6, seed=2)
    items, concepts = kit.build_vocabularies(recs)
    engine, _, _ = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts, [], max_batch=10)
    source = Joining(kit.as_records(recs), polls_before_joined=8)
    source.on_assigned, engine.source = engine.on_assigned, source
    engine.collector = collector = BatchCollector(young_objects=1)
    freed: list = []
    held = []  # what the join still holds while it waits
    try:
        collector.start()
        for _ in range(8):  # twice as many collections as it takes to freeze, once joined
            a, b = Cycle(), Cycle()
            a.other, b.other = b, a
            weakref.finalize(a, freed.append, 1)
            held.append(a)
            del a, b
            engine.step()
        assert not engine.joined and collector.collections == 8
        held.clear()  # the join is over: its garbage is garbage now
        engine.step()  # the first assignment
        assert engine.joined and freed == [1] * 8, "the join's garbage was frozen while it was held"
    finally:
        engine.close()


@pytest.mark.parametrize("collect", [True, False])
def test_cyclic_garbage_is_collected_right_after_a_rebalance_when_asked(kit, collect):
    """With a collector (engine.gc_tuning) the engine collects in the step whose poll brought a
    rebalance, and only then: a join's garbage goes in a pause the group already takes."""
    recs = kit.stream(n_learners=3, mean_length=6, seed=3, query_prob=0.0)
    items, concepts = kit.build_vocabularies(recs)
    engine, source, _ = kit.memory_engine(kit.tiny_model("dkt", items, concepts), items, concepts,
                                          kit.as_records(recs, partitions=1), max_batch=5)
    # collections between micro-batches never start here: only the full one after a rebalance can run
    engine.collector = BatchCollector(young_objects=10**9) if collect else None

    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # only the engine may collect here
    try:
        engine.step()  # the source's first poll assigns its partitions
        quiet, after = [], []
        cycle(quiet)
        engine.step()
        assert quiet == [], "collected without a rebalance"
        engine.on_assigned([(kit.EVENTS, 0)])
        cycle(after)
        engine.step()
        assert after == ([1] if collect else [])
        assert quiet == ([1] if collect else [])
        assert engine.metrics.loop_totals["gc"] > 0 if collect else engine.metrics.loop_totals["gc"] == 0
    finally:
        engine.close()
        if was_enabled:
            gc.enable()
        gc.collect()
