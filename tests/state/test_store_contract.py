"""The state store contract, for every backend: round trip, one atomic write per partition, reopen, cache seam."""

from __future__ import annotations

import pytest
import torch

from ktstream.core import LearnerState
from ktstream.engine.state_cache import StateCache
from ktstream.state import MemoryStore, SqliteStore
from ktstream.state.store import StoreError

P0, P1 = ("ev", 0), ("ev", 1)


@pytest.fixture(params=["sqlite", "memory"])
def make_store(request, tmp_path):
    """A factory: calling it twice gives the same durable data (a reopened file, or the same memory)."""
    shared = MemoryStore()
    return (lambda **kw: SqliteStore(tmp_path / "state", **kw)) if request.param == "sqlite" else (lambda **kw: shared)


def learner(lid, partition=P0, offset=3, seed=0, step=False):
    g = torch.Generator().manual_seed(seed)
    state = {"h": torch.randn(1, 8, generator=g), "mem": torch.randn(1, 4, 5, generator=g).double(),
             "n": torch.tensor([[seed]], dtype=torch.long)}
    st = LearnerState(lid, state, "v7", partition, last_offset=offset, events=offset + 1, responses=offset,
                      late=1, last_event_time_ms=1_700_000_000_000 + seed, last_event_id=f"e{seed}")
    if step:
        st.step_key, st.step_state = ("s", "b9"), {k: v + 1 for k, v in state.items()}
    return st


def same(a: LearnerState, b: LearnerState):
    assert (a.learner_id, a.model_version, a.partition, a.step_key, a.last_event_time_ms, a.last_event_id,
            a.last_offset, a.events, a.responses, a.late) == \
           (b.learner_id, b.model_version, b.partition, b.step_key, b.last_event_time_ms, b.last_event_id,
            b.last_offset, b.events, b.responses, b.late)
    for x, y in ((a.state, b.state), (a.step_state or {}, b.step_state or {})):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and torch.equal(x[k], y[k]), k


def test_round_trip_exact_and_offsets(make_store):
    s = make_store()
    assert s.open(P0) == -1 and s.open(P1) == -1 and s.load("a") is None
    a, b = learner("a", step=True), learner("b", P1, seed=2)
    s.write([a, b], {P0: 4, P1: 9})
    same(s.load("a"), a)
    same(s.load("b"), b)
    assert (s.offset(P0), s.offset(P1), s.count(P0), s.count(P1)) == (4, 9, 1, 1)
    assert s.nbytes(P0) > 8 * 4 + 20 * 8


def test_write_is_atomic_per_partition(make_store):
    s = make_store()
    s.open(P0)
    s.write([learner("a", offset=3)], {P0: 4})
    broken = learner("b", seed=5)
    broken.state = {"h": "not a tensor"}  # encoding fails mid-write
    with pytest.raises(StoreError, match="cannot encode learner 'b'"):
        s.write([learner("a", offset=10, seed=1), broken], {P0: 12})
    assert s.offset(P0) == 4 and s.load("b") is None
    same(s.load("a"), learner("a", offset=3))


def test_reopen_keeps_state_and_closed_partitions_are_not_served(make_store):
    s = make_store()
    s.open(P0)
    s.write([learner("a")], {P0: 4})
    s.close()
    s2 = make_store()
    assert s2.load("a") is None  # not open: this instance does not own the partition
    assert s2.open(P0) == 4
    same(s2.load("a"), learner("a"))
    assert [st.learner_id for st in s2.learners(P0)] == ["a"]


def test_fp16_halves_float32_and_restores_float32(make_store):
    s = make_store(fp16=True)
    s.open(P0)
    a = learner("a")
    s.write([a], {P0: 1})
    back = s.load("a")
    assert back.state["h"].dtype == torch.float32 and torch.allclose(back.state["h"], a.state["h"], atol=1e-2)
    assert torch.equal(back.state["mem"], a.state["mem"])  # only float32 is narrowed


def test_cache_reloads_evicted_learners_from_the_store(make_store):
    s = make_store()
    s.open(P0)
    cache = StateCache(max_bytes=learner("x").nbytes + 10, store=s)
    cache.apply([learner("a", seed=1), learner("b", seed=2)], {P0: 5})
    assert "a" not in cache and cache.evictions >= 1
    same(cache.get("a"), learner("a", seed=1))
    assert "a" in cache and s.offset(P0) == 5


def test_changelog_checkpoint_is_written_with_the_rows_and_never_goes_back(make_store):
    s = make_store()
    s.open(P0)
    assert s.changelog_offset(P0) == 0  # none recorded: a restore reads from the beginning
    s.write([learner("a")], {P0: 4}, {P0: 17})
    assert s.changelog_offset(P0) == 17 and s.changelog_offset(P1) == 0
    s.write([learner("a", offset=5)], {P0: 6}, {P0: 12})  # an older checkpoint never moves it back
    s.write([learner("a", offset=6)], {P0: 7})  # no changelog record acknowledged: unchanged
    assert s.changelog_offset(P0) == 17
    broken = learner("b", seed=5)
    broken.state = {"h": "not a tensor"}
    with pytest.raises(StoreError, match="cannot encode learner 'b'"):
        s.write([broken], {P0: 9}, {P0: 30})  # all or nothing: the checkpoint too
    assert s.changelog_offset(P0) == 17
    s.close()
    s2 = make_store()
    s2.open(P0)
    assert s2.changelog_offset(P0) == 17


def test_a_transaction_holds_states_and_offsets_until_its_commit(make_store):
    s = make_store()
    s.open(P0)
    part = s.partition(P0)
    tx = part.begin()
    tx.put(learner("a", offset=7))
    assert part.load("a") is None and part.offset() == -1, "nothing is written before the commit"
    tx.commit(offset=8, changelog_offset=3)
    same(part.load("a"), learner("a", offset=7))
    assert (part.offset(), part.changelog_offset(), part.count()) == (8, 3, 1)
    assert [st.learner_id for st in part.learners()] == ["a"] and part.nbytes() == s.nbytes(P0) > 0
    with pytest.raises(AssertionError, match="commits once"):
        tx.commit(offset=9)
    assert part.offset() == 8


def test_a_transaction_that_cannot_encode_a_state_writes_nothing(make_store):
    s = make_store()
    s.open(P0)
    part = s.partition(P0)
    tx = part.begin()
    tx.put(learner("a"))
    broken = learner("b", seed=5)
    broken.state = {"h": "not a tensor"}
    with pytest.raises(StoreError, match="cannot encode learner 'b'"):
        tx.put(broken)
    assert part.load("a") is None and part.offset() == -1
    with pytest.raises(AssertionError, match="not open"):
        s.partition(P1)
