"""The archive in columns equals the record reader it replaced, and its memory does not grow with the archive."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow.parquet as pq
import pytest

from ktstream.data.archive_reader import archive_files, read_archive
from ktstream.data.columnar import (ScanConfig, connect, encode_table, first_seen, learner_groups, learner_tables,
                                    memory_bytes, scan, scan_table)
from ktstream.data.eventlog import iter_parquet, write_parquet
from ktstream.data.histories import build_vocabularies, encode
from ktstream.data.synthetic_archive import DAY_MS, START_MS, write_synthetic_archive


def reference_read_archive(folder, start_ms=None, end_ms=None, include_undated=False):
    """The record reader as it stood before the columnar path: one dict per event, sorted in Python."""
    seen, dated, undated = set(), [], []
    for path in archive_files(folder, start_ms, end_ms, include_undated):
        for rec in iter_parquet(path):
            key = (rec["learner_id"], rec["event_id"])
            if key in seen:
                continue
            seen.add(key)
            t = rec.get("event_time")
            if t is None:
                undated.append(rec)
            elif (start_ms is None or t >= start_ms) and (end_ms is None or t < end_ms):
                dated.append(rec)
    dated.sort(key=lambda r: (r["event_time"], r["learner_id"], r.get("seq", 0)))
    return dated + undated


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """A synthetic archive (repeats included) plus the awkward cases: a repeat whose first copy differs
    from the later one, ties on time and seq, events without seq, and undated events."""
    root = tmp_path_factory.mktemp("archive")
    write_synthetic_archive(root, 30_000, seed=4, days=40, n_items=300, n_concepts=20)
    day = root / "event_date=2019-01-05"
    t = START_MS + 4 * DAY_MS + 1000
    odd = [{"event_id": "x1", "learner_id": "u1", "item_id": "first", "event_time": t, "seq": 5},
           {"event_id": "x2", "learner_id": "u1", "item_id": "tie-a", "event_time": t, "seq": 5},
           {"event_id": "x3", "learner_id": "u1", "item_id": "no-seq", "event_time": t, "concept_ids": ["k", "j"]},
           {"event_id": "x4", "learner_id": "zz", "item_id": "q1", "event_time": t, "attributes": {"a": [1]}}]
    write_parquet(odd, day / "part-zz0.parquet")
    write_parquet([{**odd[0], "item_id": "second copy"}, odd[1]], day / "part-zz1.parquet")
    early = root / "event_date=2019-01-04"  # a first copy before a window's start, its later copy inside
    first = {"event_id": "x5", "learner_id": "u1", "item_id": "shadowed", "event_time": START_MS + 3 * DAY_MS + 1}
    # x6: a later copy in file order with an earlier time, so the learner order puts it right before its
    # first copy (dropping the second of two equal neighbours would keep the wrong one)
    back = {"event_id": "x6", "learner_id": "u1", "item_id": "shadowed", "event_time": START_MS + 3 * DAY_MS + 300}
    write_parquet([first, back], early / "part-zz0.parquet")
    write_parquet([{**first, "event_time": START_MS + 3 * DAY_MS + 100},
                   {**back, "item_id": "back copy", "event_time": START_MS + 3 * DAY_MS + 200}],
                  early / "part-zz1.parquet")
    (root / "event_date=none").mkdir()
    write_parquet([{"event_id": f"n{i}", "learner_id": "u2", "item_id": "q", "seq": i} for i in (3, 1)],
                  root / "event_date=none" / "part-0.parquet")
    return root


@pytest.mark.parametrize("window", [(None, None, False), (None, None, True),
                                    (START_MS + 3 * DAY_MS + 5, START_MS + 9 * DAY_MS, False)])
def test_read_archive_equals_the_record_reader(archive, window):
    expected = reference_read_archive(archive, *window)
    got = read_archive(archive, *window, cfg=ScanConfig(batch_rows=4096))
    assert got == expected and len(got) > 1000
    firsts = [r for r in got if r["event_id"] == "x1"]
    assert window[0] is not None or [r["item_id"] for r in firsts] == ["first"], "the first copy in file order"


def test_encode_table_equals_encode_in_pieces(archive):
    records = reference_read_archive(archive)
    items, concepts = build_vocabularies(records)
    expected = encode(records, items, concepts)
    tables = list(learner_tables(scan(archive, order="learner", cfg=ScanConfig(batch_rows=1000)), 3000))
    assert len(tables) > 5 and all(t.num_rows < 3000 + 2000 for t in tables[:-1])
    got = [h for t in tables for h in encode_table(t, items, concepts)]
    assert [h.learner_id for h in got] == [h.learner_id for h in expected]
    for a, b in zip(expected, got):
        for name in ("items", "concepts", "responses", "step_start"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{name} of {a.learner_id}")
        np.testing.assert_array_equal(a.times, b.times)
        assert a.event_ids == b.event_ids


@pytest.mark.parametrize("window", [(None, None, False), (None, None, True),
                                    (START_MS + 3 * DAY_MS + 5, START_MS + 9 * DAY_MS, False)])
def test_scan_by_learner_equals_the_record_reader_in_learner_order(archive, window):
    """The learner order drops repeats after its sort: the same rows as the record reader (first copy
    in file order, before the time filter: x5's first copy falls before the window, so x5 is gone)."""
    expected = sorted(reference_read_archive(archive, *window),
                      key=lambda r: (r["learner_id"], r.get("event_time") is None, r.get("event_time") or 0,
                                     r.get("seq", 0)))  # stable: ties stay in file order
    got = scan_table(archive, *window, order="learner", cfg=ScanConfig(batch_rows=1000))
    cols = ["learner_id", "event_id", "item_id", "event_time"]
    assert got.select(cols).to_pylist() == [{c: r.get(c) for c in cols} for r in expected] and len(expected) > 1000
    assert (window[0] is None) == ("x5" in got.column("event_id").to_pylist())
    assert [r["item_id"] for r in got.to_pylist() if r["event_id"] == "x6"] == ["shadowed"], "x6's first copy"


def test_first_seen_is_the_vocabularies_order(archive):
    cutoff = START_MS + 20 * DAY_MS
    items, concepts = build_vocabularies(r for r in reference_read_archive(archive, end_ms=cutoff))
    assert first_seen(archive, cutoff) == (items.ids, concepts.ids)


@pytest.mark.parametrize("shadowed", [False, True])
def test_first_seen_takes_the_exact_query_only_when_a_first_event_is_a_repeat(archive, tmp_path, monkeypatch, shadowed):
    """Ids' first events are found over all rows; an id whose first event has an earlier copy in file
    order (x1's second copy brings the item "second copy") sends the call to the deduplicated query."""
    import ktstream.data.columnar as columnar

    folder = archive if shadowed else tmp_path
    if not shadowed:  # repeats with equal copies only (the archiver's): the fast path holds
        write_synthetic_archive(folder, 20_000, seed=7, days=30, n_items=200, n_concepts=20, duplicate_rate=0.01)
    cutoff = START_MS + 20 * DAY_MS
    calls = []
    exact = columnar._first_seen_exact
    monkeypatch.setattr(columnar, "_first_seen_exact", lambda *a: calls.append(1) or exact(*a))
    items, concepts = build_vocabularies(r for r in reference_read_archive(folder, end_ms=cutoff))
    assert first_seen(folder, cutoff) == (items.ids, concepts.ids) and len(items.ids) > 100
    assert len(calls) == int(shadowed)


def test_scan_streams_in_batches_of_the_configured_size(archive):
    sizes = [b.num_rows for b in scan(archive, order="time", cfg=ScanConfig(batch_rows=2048))]
    assert max(sizes) <= 2048 and sum(sizes) == scan_table(archive).num_rows


def test_repeats_and_files_are_counted_in_the_archive(archive):
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in archive_files(archive, include_undated=True))
    assert rows > len(read_archive(archive, include_undated=True)), "the synthetic archive holds repeats"


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    """A synthetic archive in blocks of learners that share no file (as a keyed topic's partitions do),
    plus one file holding a learner of block 0 and one of block 2 (a partition count that changed)."""
    root = tmp_path_factory.mktemp("partitioned")
    write_synthetic_archive(root, 40_000, seed=6, days=30, n_items=300, n_concepts=20, block_events=5_000)
    block = {}
    for p in archive_files(root):
        for learner in pq.read_table(p, columns=["learner_id"]).column(0).unique().to_pylist():
            block[learner] = p.name.split("-")[1].split(".")[0]
    a = next(u for u, b in block.items() if b == "00000")
    c = next(u for u, b in block.items() if b == "00002")
    write_parquet([{"event_id": "moved-a", "learner_id": a, "item_id": "q1", "event_time": START_MS + 9 * DAY_MS},
                   {"event_id": "moved-c", "learner_id": c, "item_id": "q2", "event_time": START_MS + 9 * DAY_MS}],
                  root / "event_date=2019-01-10" / "part-99999-moved.parquet")
    return root


def _learners(path):
    return set(pq.read_table(path, columns=["learner_id"]).column(0).unique().to_pylist())


def test_learner_groups_never_split_a_learner(partitioned):
    files = archive_files(partitioned)
    rows = {p: pq.ParquetFile(p).metadata.num_rows for p in files}
    groups = learner_groups(connect(), files, 9_000)
    assert sorted(p for g in groups for p in g) == sorted(files) and all(g == sorted(g) for g in groups)
    held = [set().union(*(_learners(p) for p in g)) for g in groups]
    assert all(not (held[i] & held[j]) for i in range(len(held)) for j in range(i))
    moved = next(i for i, g in enumerate(groups) if any("moved" in p.name for p in g))
    blocks = {p.name.split("-")[1].split(".")[0] for p in groups[moved]}
    assert {"00000", "00002", "99999"} <= blocks, "the moved learners tie their blocks' files into one group"
    assert len(groups) >= 5 and all(sum(rows[p] for p in g) <= 9_000 for i, g in enumerate(groups) if i != moved)
    assert learner_groups(connect(), files, sum(rows.values())) == [files], "an archive that fits is one group"


@pytest.mark.parametrize("window", [(None, None), (START_MS + 5 * DAY_MS, START_MS + 20 * DAY_MS)])
def test_scan_by_learner_in_groups_holds_each_learner_whole_and_in_order(partitioned, window):
    """Sorted a group at a time: each learner's rows together and in the record reader's order, learners
    in id order within each group, and the same rows as one sort of the whole archive."""
    grouped = scan_table(partitioned, *window, order="learner", cfg=ScanConfig(sort_rows=9_000, batch_rows=1000))
    whole = scan_table(partitioned, *window, order="learner", cfg=ScanConfig(batch_rows=1000))
    learners = grouped.column("learner_id").to_pylist()
    runs = [u for i, u in enumerate(learners) if i == 0 or u != learners[i - 1]]
    assert len(runs) == len(set(runs)), "each learner's rows together"
    assert runs != sorted(runs), "groups, not one sort"
    assert whole.column("learner_id").to_pylist() == sorted(learners)
    expected = sorted(reference_read_archive(partitioned, *window),
                      key=lambda r: (r["learner_id"], r["event_time"], r.get("seq", 0)))
    cols = ["learner_id", "event_id", "item_id", "event_time"]
    rank = {u: i for i, u in enumerate(runs)}
    in_groups = sorted(expected, key=lambda r: rank[r["learner_id"]])  # stable: each learner's order stays
    assert grouped.select(cols).to_pylist() == [{c: r.get(c) for c in cols} for r in in_groups]
    assert len(in_groups) > 10_000


def test_memory_limits_read_as_bytes():
    assert memory_bytes("2GB") == memory_bytes("2g") == 2 * 10**9 and memory_bytes("512 MiB") == 512 * 2**20
    assert ScanConfig(memory_limit="3GB").rows_sorted_at_once() == 12 * 10**6
    assert ScanConfig(sort_rows=5).rows_sorted_at_once() == 5
    with pytest.raises(ValueError, match="sort_rows"):
        ScanConfig(memory_limit="80%").rows_sorted_at_once()
    assert ScanConfig(memory_limit="80%", sort_rows=7).rows_sorted_at_once() == 7


SCALE = """
import json, resource, sys
from ktstream.data.columnar import ScanConfig, connect, encode_table, learner_tables, scan
from ktstream.data.histories import build_vocabularies
from ktstream.data.vocab import Vocabulary
folder, limit = sys.argv[1], sys.argv[2]
cfg = ScanConfig(memory_limit=limit, threads=2, temp_directory=folder + "-spill")
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
items, concepts = Vocabulary([f"q{i}" for i in range(2000)]), Vocabulary([f"c{i}" for i in range(50)])
n = positions = 0
for table in learner_tables(scan(folder, order="learner", cfg=cfg, con=connect(cfg)), 200_000):
    for h in encode_table(table, items, concepts, arrow_ids=True):
        n += 1
        positions += len(h)
print(json.dumps({"positions": positions, "learners": n, "growth_mb":
                  (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}))
"""


@pytest.mark.slow
def test_memory_stays_bounded_on_a_million_events(tmp_path):
    """1.2M events through scan -> learner tables -> histories in a fresh process: the peak RSS grows by
    less than 450 MB (under 400 bytes an event; the record reader held 812), with DuckDB held to 300 MB."""
    folder = tmp_path / "archive"
    stats = write_synthetic_archive(folder, 1_200_000, seed=5, days=60, n_items=2000, n_concepts=50)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SCALE), str(folder), "300MB"], check=True,
                         capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["positions"] == stats["events"] and result["learners"] == stats["learners"]
    assert result["growth_mb"] < 450, result


def test_a_canonical_log_scans_into_the_histories_encode_makes(tmp_path):
    from ktstream.data.columnar import scan_log
    from ktstream.data.simulate import simulate

    records = simulate(n_learners=30, n_items=20, n_concepts=5, mean_length=30, seed=1)
    records[3] = {k: v for k, v in records[3].items() if k != "seq"}
    records.append({"event_id": "late", "learner_id": records[0]["learner_id"], "item_id": "q1",
                    "event_time": records[0]["event_time"], "seq": records[0].get("seq", 0)})  # a tie: file order
    path = tmp_path / "log.parquet"
    write_parquet(records, path)
    items, concepts = build_vocabularies(records)
    expected = encode(records, items, concepts)
    got = [h for t in learner_tables(scan_log(path, ScanConfig(batch_rows=100)), 200)
           for h in encode_table(t, items, concepts)]
    assert [h.learner_id for h in got] == [h.learner_id for h in expected]
    for a, b in zip(expected, got):
        for name in ("items", "concepts", "responses", "times", "step_start"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert a.event_ids == b.event_ids
