"""The state cache's byte bound bounds the memory its learner states really hold, whatever their ids' lengths.

Learners whose events name 16 concepts of 200 characters (the issue's shape, smaller) go through the engine;
the bytes the cached states hold are then measured object by object (every tuple, string, int and the
dataclass once, however many states share it, plus the tensors' bytes) and compared with what the cache
believes it holds. Before the window's bytes were counted, a record cost a flat 180 bytes there and the
cache believed a tenth of what it held.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from ktstream.core import Record, memory_nbytes
from ktstream.data.vocab import Vocabulary
from ktstream.engine import MemorySink, MemorySource, StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.models import create, family
from ktstream.serving.runner import ModelRunner


def events(n_learners, n_events, n_concepts, chars, shared):
    """Each learner's events; its concept ids are new on every event unless ``shared``."""
    out = []
    for i in range(n_events):
        for u in range(n_learners):
            lid = f"learner-{u}-".ljust(chars, "l")
            tag = f"{u}" if shared else f"{u}-{i}"
            ev = {"event_id": f"e{u}-{i}", "learner_id": lid, "item_id": f"item-{tag}-".ljust(chars, "i"),
                  "concept_ids": [f"c{tag}-{j}-".ljust(chars, "c") for j in range(n_concepts)],
                  "response": (u + i) % 2, "event_time": 1_700_000_000_000 + 1000 * i}
            out.append(Record("ev", 0, len(out), lid.encode(), json.dumps(ev).encode(), 0))
    return out


def held_bytes(cache: StateCache) -> int:
    """What the cached states hold: every Python object reachable from them once, and tensor bytes."""
    seen: set[int] = set()

    def size(obj) -> int:
        if id(obj) in seen or obj is None or isinstance(obj, (bool, torch.Tensor)):
            return 0
        seen.add(id(obj))
        n = sys.getsizeof(obj)
        if isinstance(obj, tuple):
            n += sum(size(x) for x in obj)
        elif isinstance(obj, dict):
            n += sum(size(k) for k in obj)
        return n

    total = 0
    for lid in list(cache.keys()):
        st = cache.peek(lid)
        total += memory_nbytes(st.state, st.step_state) + size(st) + size(st.state) + size(st.step_state)
        total += sum(size(getattr(st, f)) for f in ("learner_id", "model_version", "partition", "step_key",
                                                   "last_event_id", "window"))
    return total


def run(records, cache_bytes):
    items, concepts = Vocabulary([f"q{i}" for i in range(10)]), Vocabulary(["c1"])
    torch.manual_seed(0)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), n_categories=2,
                   **family("dkt").tiny_config).eval()
    proc = Processor(ModelRunner(model, items, concepts, "v0", False), StateCache(cache_bytes), "pred", "dead")
    source = MemorySource(records)
    engine = Engine(source, MemorySink(), proc, max_batch=100)
    while source.pending:
        engine.step()
    return proc.cache


@pytest.mark.parametrize("shared", [False, True], ids=["ids-new-on-every-event", "ids-repeated"])
def test_cache_bytes_cover_what_states_with_long_ids_hold(shared):
    cache = run(events(40, 12, 16, 200, shared), cache_bytes=1 << 40)
    held = held_bytes(cache)
    assert len(cache) == 40 and held > 40 * 16 * 200, "the windows really hold the long ids"
    assert cache.bytes >= held, f"the cache believes {cache.bytes} bytes but its states hold {held}"
    if not shared:  # nothing to share: the count is close, not just an upper bound
        assert cache.bytes <= 1.25 * held


def test_a_capped_cache_of_long_id_learners_holds_no_more_than_its_cap():
    cap = 1 << 20
    cache = run(events(40, 12, 16, 200, shared=False), cache_bytes=cap)
    assert cache.evictions > 0 and held_bytes(cache) <= cache.bytes <= cap
