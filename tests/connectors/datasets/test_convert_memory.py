"""`convert` streams: its memory does not grow with the input (a whole-file read would grow with it).

Traced Python allocations (tracemalloc) of converting a DKT-paper CSV to JSONL, at N and 4N learners of
500 responses each: the peak grows by under a tenth of the input file's growth. What does grow is the
statistics' set of learner ids (about 0.2 byte an event here); the records themselves stream through.
"""

from __future__ import annotations

import tracemalloc

from connectors.datasets import convert


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
