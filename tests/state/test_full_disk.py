"""A full disk under the local state store: the real error surfaces, and a restart loses nothing.

SQLite's page limit (``PRAGMA max_page_count``, per connection) stands in for a full file system:
once the partition's file may not grow, the next store write after a committed transaction fails
with SQLite's own reason ("database or disk is full"), not with the failed rollback that used to
hide it ("cannot rollback - no transaction is active"). The engine treats it as Kafka Streams treats a
failed state write: a fatal task error (``engine.step`` raises, ``ktstream serve`` exits non-zero)
rather than serving on from a store that no longer matches the committed offsets. Once there is room
again the restarted engine repairs the store from the changelog and serves on: every input predicted
exactly once as the offline replay says, every stored state equal to an uninterrupted run's within 1e-6.
"""

from __future__ import annotations

import pytest

from ktstream.models.checkpoint import ServingModel
from ktstream.state import SqliteStore
from ktstream.state.store import StoreError
from tests.state.test_corrupt_store import Broker, assert_exact, committed, engine_over, finish
from tests.state.test_store_engine import setup

FULL = ("ev", 1)


def test_full_disk_surfaces_the_real_error_and_a_restart_repairs_the_store(tmp_path):
    model, items, concepts, records, reference = setup(n_learners=40)  # enough learners that the file grows
    serving = ServingModel(model, items, concepts, "v0")
    broker, state_dir = Broker(records), tmp_path / "state"
    broker.reads = []
    store = SqliteStore(state_dir)
    first = engine_over(state_dir, serving, broker, store=store)
    while store.offset(FULL) <= 0:  # the partition's first rows are in: its file will grow from here
        first.step()
    conn = store.partition(FULL).conn  # the partition's own connection: the page limit is per connection
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError) as failure:
        for _ in range(len(records)):
            first.step()
    assert "database or disk is full" in str(failure.value) and str(FULL) in str(failure.value)
    assert "cannot rollback" not in str(failure.value)
    assert committed(broker) < len(records), "the failure came while the stream was still running"
    first.close()
    store.close()

    second = engine_over(state_dir, serving, broker)  # a restart, with room on the disk again
    finish(second, broker, records)
    assert second.state.restored_records > 0, "the committed batch the store missed came from the changelog"
    second.state.close()
    assert_exact(broker, records, reference, state_dir, serving)
