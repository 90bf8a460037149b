"""The service's process tuning (engine.malloc_tuning): a wave's tensors come from the C heap, and the
memory they free stays there for the next wave. Run in fresh subprocesses: mallopt changes the whole
process, and glibc adapts its thresholds as a process runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import json, sys, torch
    from ktstream.service import tune_malloc

    def heap() -> tuple[int, int]:
        for line in open("/proc/self/maps"):
            if line.rstrip().endswith("[heap]"):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                return start, end
        return 0, 0

    tuned = sys.argv[1] == "tuned" and tune_malloc()
    wave = [torch.empty(1 << 20).fill_(1.0) for _ in range(8)]  # eight (B, ...) temporaries of 4 MB
    start, end = heap()
    in_heap = sum(start <= t.data_ptr() < end for t in wave)
    del wave
    print(json.dumps({"tuned": tuned, "in_heap": in_heap, "given_back": end - heap()[1]}))
""")


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_tuned_malloc_serves_wave_tensors_from_the_heap_and_keeps_what_they_free():
    tuned = probe("tuned")
    if not tuned["tuned"]:
        pytest.skip("this C library has no glibc mallopt")
    plain = probe("plain")
    assert tuned["in_heap"] == 8 and tuned["given_back"] == 0, tuned  # kept for the next wave: no new faults
    assert plain["in_heap"] == 0, plain  # glibc's defaults: a fresh mapping per tensor, faulted in anew
