"""`convert` streams: its memory does not grow with the input (a whole-file read would grow with it).

Traced Python allocations (tracemalloc) of converting a DKT-paper CSV to JSONL, at N and 4N learners of
500 responses each: the peak grows by under a tenth of the input file's growth. What does grow is the
statistics' set of learner ids (about 0.2 byte an event here); the records themselves stream through.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from connectors.datasets import convert, sorted_rows


def _write_dkt_csv(path, learners: int, length: int = 500) -> int:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(learners):
            fh.write(f"{length}\n" + "".join(f"{(i + j) % 110}," for j in range(length)) + "\n"
                     + "".join(f"{(i * j) % 2}," for j in range(length)) + "\n")
    return path.stat().st_size


def _peak(tmp_path, learners: int) -> tuple[int, int, int]:
    source = tmp_path / f"builder_{learners}.csv"
    size = _write_dkt_csv(source, learners)
    tracemalloc.start()
    try:
        stats = convert("dkt-csv", source, tmp_path / f"out_{learners}.jsonl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, size, stats.interactions_out


def test_convert_memory_does_not_grow_with_the_input(tmp_path):
    _peak(tmp_path, 1)  # the first conversion's imports and caches are not the input's
    small_peak, small_size, small_events = _peak(tmp_path, 20)
    large_peak, large_size, large_events = _peak(tmp_path, 80)
    assert (small_events, large_events) == (10_000, 40_000)
    assert large_peak - small_peak < 0.1 * (large_size - small_size), (small_peak, large_peak, large_size)


# --------------------------------------------------------------------------- the two formats sorted on disk
# assistments-raw and datashop need each learner's rows from the whole input before its first record; their
# rows go to Parquet and come back sorted by DuckDB (connectors.datasets.sorted_rows). Two measures, since
# tracemalloc does not see DuckDB's or Arrow's native memory: the Python heap of the whole conversion
# (tracemalloc, in this process), and the peak resident memory of the sort alone (a subprocess's own
# `resource.getrusage(RUSAGE_SELF).ru_maxrss`, which counts DuckDB's native memory).

SORTED_HEADERS = {
    "assistments-raw": "order_id,user_id,problem_id,correct,skill_id,attempt_count,hint_count,ms_first_response\n",
    "datashop": "Row\tAnon Student Id\tProblem Name\tStep Name\tFirst Transaction Time\tCorrect First Attempt\t"
                "Incorrects\tKC(Default)\n",
}


def _write_sorted_format(path, fmt: str, rows: int) -> int:
    """`rows` rows, 500 a learner (as the DKT-paper file above), learners interleaved and each one's rows
    out of order."""
    learners = rows // 500
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(SORTED_HEADERS[fmt])
        for i in range(rows):
            u, j = i % learners, i // learners
            k = (j * 37) % 500  # the learner's j-th row in the file is its k-th in order
            if fmt == "assistments-raw":
                fh.write(f"{u * 1000 + k},u{u},p{(u + k) % 300},{(u * k) % 2},{k % 40},1,{k % 3},{k * 100}\n")
            else:
                fh.write(f"{i + 1}\ts{u}\tP{(u + k) % 60}\tR{k % 5}\t2006-10-26 {k // 60:02d}:{k % 60:02d}:00.0\t"
                         f"{(u * k) % 2}\t{k % 3}\tKC{k % 40}~~KC{(k + 1) % 40}\n")
    return path.stat().st_size


def _sorted_format_peak(tmp_path, fmt: str, rows: int) -> tuple[int, int, int]:
    source = tmp_path / f"{fmt}_{rows}.txt"
    size = _write_sorted_format(source, fmt, rows)
    tracemalloc.start()
    try:
        stats = convert(fmt, source, tmp_path / f"out_{fmt}_{rows}.jsonl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, size, stats.interactions_out


@pytest.mark.parametrize("fmt", sorted(SORTED_HEADERS))
def test_sorted_formats_hold_no_python_object_per_row(tmp_path, monkeypatch, fmt):
    """The Python heap holds one batch of rows, one learner and the statistics' id sets, not the input: its
    peak grows by under a quarter of the file's growth (the in-memory grouping grew by 15-18 times it). The
    bound is looser than dkt-csv's tenth because the peak moves by tens of KB with where a batch ends within
    the 500 rows of the learner held whole."""
    monkeypatch.setattr(sorted_rows, "BATCH_ROWS", 1024)
    _sorted_format_peak(tmp_path, fmt, 500)
    small_peak, small_size, small_events = _sorted_format_peak(tmp_path, fmt, 2_500)
    large_peak, large_size, large_events = _sorted_format_peak(tmp_path, fmt, 10_000)
    assert (small_events, large_events) == (2_500, 10_000)
    assert large_peak - small_peak < 0.25 * (large_size - small_size), (small_peak, large_peak, large_size)


SORT_CHILD = """
import resource, sys
import pyarrow as pa
from connectors.datasets.sorted_rows import SortedRows
n, limit = int(sys.argv[1]), sys.argv[2]
rows = SortedRows(pa.schema([("key", pa.int64()), ("pos", pa.int64()), ("text", pa.string())]), limit, threads=1)
pad = "x" * 100
for i in range(n):
    rows.append((i * 7919) % 1000, i, pad)
last, count = (-1, -1), 0
for batch in rows.sorted("key, pos"):
    for key in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
        assert key > last
        last, count = key, count + 1
rows.close()
print(count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def _sort_peak_rss(rows: int, limit: str) -> int:
    root = Path(__file__).resolve().parents[3]  # this checkout, whatever the installed copy
    done = subprocess.run([sys.executable, "-c", SORT_CHILD, str(rows), limit], capture_output=True, text=True,
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    count, peak = map(int, done.stdout.split())
    assert count == rows
    return peak


def test_the_sort_stays_within_duckdbs_memory_limit():
    """Sorting 4x the rows (about 150 MB more as Arrow data, several times the 64 MB limit) raises the
    process's peak resident memory by under a quarter of that: DuckDB spills instead of growing."""
    small, large = 300_000, 1_200_000
    row_bytes = 8 + 8 + 100 + 4  # two int64, the text and its offset
    small_peak = _sort_peak_rss(small, "64MB")
    large_peak = _sort_peak_rss(large, "64MB")
    assert large_peak - small_peak < 0.25 * (large - small) * row_bytes, (small_peak, large_peak)
