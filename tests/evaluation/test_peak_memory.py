"""Each piece of work gets its own peak: a large earlier allocation does not show in a later, smaller run's
figure (as it did with the process's monotonic peak RSS), and the growth is about what the work allocated."""

from __future__ import annotations

import pytest
import torch

from ktstream.evaluation.peak_memory import peak_memory, reset_peak_rss

MB = 1 << 20


def allocate(megabytes: int) -> None:
    x = torch.ones(megabytes * MB // 4)  # float32: 4 bytes each
    assert float(x[-1]) == 1.0  # touched, so resident
    del x


@pytest.fixture
def linux_peak_reset():
    if not reset_peak_rss():
        pytest.skip("this kernel does not let a process reset its peak RSS (/proc/self/clear_refs, Linux 4.0+)")


def test_a_later_run_is_measured_apart_from_a_larger_earlier_one(linux_peak_reset):
    with peak_memory() as big:
        allocate(400)
    with peak_memory() as small:
        allocate(40)
    assert big["kind"] == small["kind"] == "peak RSS of this run"
    assert 380 * MB <= big["growth_bytes"] <= 480 * MB
    assert 30 * MB <= small["growth_bytes"] <= 80 * MB
    assert small["peak_bytes"] < big["peak_bytes"] - 300 * MB


def test_memory_kept_alive_before_the_run_is_not_its_growth(linux_peak_reset):
    kept = torch.ones(200 * MB // 4)
    with peak_memory() as m:
        allocate(20)
    assert m["growth_bytes"] < 60 * MB and m["peak_bytes"] >= 200 * MB
    del kept
