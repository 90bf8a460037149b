"""A corrupt local state store: moved aside at open, the partition rebuilt from its changelog, serving goes on.

The engine (built as ``ktstream serve`` builds it: exactly-once, SQLite under ``state.dir``) serves
half of a stream and stops; then one partition's file is damaged, either wholly (not a database any
more) or in its pages (the header intact, so it still opens). The restarted engine must move the
file aside (``<name>.corrupt-<time>``, counted in ``ktstream_state_stores_quarantined_total``),
rebuild the partition from its whole changelog, and finish the stream: every input predicted
exactly once as the offline replay says, and every stored state equal to an uninterrupted run's
within 1e-6.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.state_chaos import reference as uninterrupted
from ktstream.config import load_settings
from ktstream.models.checkpoint import ServingModel
from ktstream.service import build_engine
from ktstream.state import SqliteStore
from ktstream.state.sqlite import partition_path
from tests.state.test_store_engine import setup
from tests.state.test_transaction_faults import Broker, TxnSink
from tests.state.test_transaction_faults import Source as TransactionalSource

DAMAGED = ("ev", 0)
PAGE = 4096


class Source(TransactionalSource):
    """The exactly-once tests' fake consumer; restore options (a stall timeout) do not apply to a list."""

    def read_partition(self, topic, part, start=0, **options):
        return super().read_partition(topic, part, start)


@pytest.fixture(scope="module")
def world():
    model, items, concepts, records, reference = setup(n_learners=12)
    return ServingModel(model, items, concepts, "v0"), records, reference


def engine_over(state_dir, serving, broker, store=None):
    settings = load_settings(None, kafka={"topics": {"events": "ev", "predictions": "pred", "dead_letters": "dead"}},
                             engine={"max_batch": 9, "describe": False},
                             state={"dir": str(state_dir), "processing_guarantee": "exactly-once"})
    return build_engine(settings, serving, Source(broker), TxnSink(broker), store=store)


def committed(broker) -> int:
    return sum(broker.committed.values())


def finish(engine, broker, records) -> None:
    for _ in range(10 * len(records)):  # bounded: one record per step at the very least
        if committed(broker) >= len(records):
            return
        engine.step()
    raise AssertionError("the engine did not finish the stream")


def assert_exact(broker, records, reference, state_dir, serving) -> None:
    """Exactly one committed prediction per input, equal to the replay; stored states equal an uninterrupted run."""
    preds = [json.loads(r.value) for p in range(3) for r in broker.read_committed("pred", p)]
    keys = [(p["source"]["partition"], p["source"]["offset"]) for p in preds]
    assert sorted(keys) == sorted({(r.partition, r.offset) for r in records}), "each input predicted exactly once"
    for p in preds:
        assert torch.allclose(torch.tensor(p["probs"]), reference[p["event_id"]], atol=1e-6), p["event_id"]
    _, ref_states = uninterrupted(serving, records, None)
    store = SqliteStore(state_dir)
    for tp in {r.tp for r in records}:
        store.open(tp)
    try:
        for lid, ref in ref_states.items():
            st = store.load(lid)
            assert st is not None and (st.last_offset, st.events, st.responses) == \
                (ref.last_offset, ref.events, ref.responses), lid
            assert all(torch.allclose(st.state[k], v, atol=1e-6) for k, v in ref.state.items()), lid
    finally:
        store.close()


def not_a_database(path) -> None:
    path.write_bytes(b"this is no SQLite file\n" * 200)


def damaged_pages(path) -> None:
    """Keep the header (page 1: the file still opens) and overwrite the start of every later page."""
    data = bytearray(path.read_bytes())
    assert len(data) >= 4 * PAGE, "the store must span several pages for this fault"
    for start in range(PAGE, len(data), PAGE):
        data[start:start + 16] = b"\xa5" * 16
    path.write_bytes(bytes(data))


def half_served(serving, records, tmp_path):
    """An engine over a fresh state folder serves half the stream and stops cleanly; (broker, folder)."""
    broker, state_dir = Broker(records), tmp_path / "state"
    broker.reads = []
    first = engine_over(state_dir, serving, broker)
    while committed(broker) < len(records) // 2:
        first.step()
    first.close()
    first.state.close()  # the last connection: the WAL is checkpointed into the file
    return broker, state_dir


@pytest.mark.parametrize("damage", [not_a_database, damaged_pages], ids=["not-a-database", "damaged-pages"])
def test_corrupt_store_is_moved_aside_and_rebuilt_from_the_changelog(world, tmp_path, damage):
    serving, records, reference = world
    broker, state_dir = half_served(serving, records, tmp_path)
    path = partition_path(state_dir, DAMAGED)
    assert SqliteStore(state_dir).open(DAMAGED) > 0, "the partition had stored state before the damage"
    damage(path)

    second = engine_over(state_dir, serving, broker)
    finish(second, broker, records)
    assert second.metrics.registry.get_sample_value("ktstream_state_stores_quarantined_total") == 1
    assert second.state.restored_records > 0, "the partition was rebuilt from its changelog"
    moved = sorted(p.name for p in state_dir.iterdir() if ".corrupt-" in p.name)
    assert moved and all(name.startswith(path.name + ".corrupt-") for name in moved), moved
    second.state.close()
    assert_exact(broker, records, reference, state_dir, serving)


def test_corrupt_store_check_leaves_sound_files_alone(world, tmp_path):
    """The check can fail: a sound store is opened as it is, nothing moved, nothing counted."""
    serving, records, reference = world
    broker, state_dir = half_served(serving, records, tmp_path)
    second = engine_over(state_dir, serving, broker)
    finish(second, broker, records)
    assert second.metrics.registry.get_sample_value("ktstream_state_stores_quarantined_total") == 0
    assert not [p for p in state_dir.iterdir() if ".corrupt-" in p.name]
    second.state.close()
    assert_exact(broker, records, reference, state_dir, serving)
