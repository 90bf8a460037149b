"""Peak memory of one piece of work, measured apart from the work that ran before it in the same process.

A study trains many configurations one after another in one process, so the process's peak resident set
(``getrusage``) only says how much the largest so far took. Here, per piece of work:

- on a GPU: CUDA's peak allocation, reset before the work;
- on the CPU under Linux: the resident high-water mark (``VmHWM``), reset before the work through
  ``/proc/self/clear_refs`` after the C heap has handed its free pages back (``malloc_trim``), so the
  resident set at the start is what is live;
- elsewhere: the process's peak RSS so far, which only grows (an upper bound; ``growth_bytes`` is None).

Each gives the peak and its growth above the memory in use at the start (the work's own need).
"""

from __future__ import annotations

import re
import resource
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from ktstream.malloc import trim_heap

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")
RESET_PEAK_RSS = "5"  # clear_refs: reset the peak resident set size (Linux 4.0 and later)


def status_bytes(field: str) -> int:
    """A ``kB`` field of /proc/self/status (``VmRSS``, ``VmHWM``) in bytes."""
    return int(re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.M).group(1)) * 1024


def reset_peak_rss() -> bool:
    """Set the resident high-water mark to the present resident set; False where Linux does not let us."""
    try:
        CLEAR_REFS.write_text(RESET_PEAK_RSS)
        return status_bytes("VmHWM") <= status_bytes("VmRSS") + (1 << 20)
    except (OSError, AttributeError):
        return False


@contextmanager
def peak_memory(cuda: bool = False) -> Iterator[dict]:
    """Yield a dict that holds, once the block ends, ``peak_bytes``, ``growth_bytes`` and ``kind``.

    >>> with peak_memory() as m:
    ...     x = torch.ones(1 << 20)
    >>> m["peak_bytes"] > 0
    True
    """
    out: dict = {}
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        yield out
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        out.update(peak_bytes=peak, growth_bytes=peak - start, kind="cuda peak allocated")
        return
    trim_heap()
    reset = STATUS.exists() and reset_peak_rss()
    start = status_bytes("VmRSS") if reset else 0
    yield out
    if reset:
        peak = status_bytes("VmHWM")
        out.update(peak_bytes=peak, growth_bytes=peak - start, kind="peak RSS of this run")
    else:
        out.update(peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, growth_bytes=None,
                   kind="process peak RSS so far (an upper bound)")
