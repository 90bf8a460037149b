"""The C heap's tuning (ktstream.malloc), for serving (engine.malloc_tuning) and training
(TrainConfig.malloc_tuning): tensors of a few MB come from the heap, and the memory they free stays
there for the next wave or training step. Run in fresh subprocesses: mallopt changes the whole
process, and glibc adapts its thresholds as a process runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = textwrap.dedent("""
    import json, sys, torch
    from ktstream.malloc import tune_malloc

    def heap() -> tuple[int, int]:
        for line in open("/proc/self/maps"):
            if line.rstrip().endswith("[heap]"):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                return start, end
        return 0, 0

    def fit(tuning: bool) -> None:
        from ktstream.models import create
        from ktstream.training.trainer import TrainConfig, fit
        from tests.conftest import random_learner
        import numpy as np

        rng = np.random.default_rng(0)
        learners = [random_learner(rng, 30, 20, 6, 2, learner_id=f"u{i}") for i in range(16)]
        fit(create("dkt", n_items=20, n_concepts=6, dim=8, hidden=16), learners[:12], learners[12:],
            TrainConfig(epochs=1, progress=False, malloc_tuning=tuning))

    mode = sys.argv[1]
    tuned = mode == "tuned" and tune_malloc()
    if mode.startswith("fit"):
        fit(mode == "fit")
    wave = [torch.empty(1 << 20).fill_(1.0) for _ in range(8)]  # eight (B, ...) temporaries of 4 MB
    start, end = heap()
    in_heap = sum(start <= t.data_ptr() < end for t in wave)
    del wave
    print(json.dumps({"tuned": tuned, "in_heap": in_heap, "given_back": end - heap()[1]}))
""")


def probe(mode: str) -> dict:
    root = Path(__file__).resolve().parents[1]  # the fit probe imports tests.conftest
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, cwd=root)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def mallopt() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/maps")
    if not probe("tuned")["tuned"]:
        pytest.skip("this C library has no glibc mallopt")


def test_tuned_malloc_serves_wave_tensors_from_the_heap_and_keeps_what_they_free(mallopt):
    tuned, plain = probe("tuned"), probe("plain")
    assert tuned["in_heap"] == 8 and tuned["given_back"] == 0, tuned  # kept for the next wave: no new faults
    assert plain["in_heap"] == 0, plain  # glibc's defaults: a fresh mapping per tensor, faulted in anew


def test_training_tunes_the_heap_unless_told_not_to(mallopt):
    tuned, untouched = probe("fit"), probe("fit-untuned")
    assert tuned["in_heap"] == 8 and tuned["given_back"] == 0, tuned
    assert untouched["in_heap"] == 0, untouched
