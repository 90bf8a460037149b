"""The C heap's thresholds for tensor-sized allocations (glibc ``mallopt``), shared by serving and training.

glibc serves an allocation above its mmap threshold (adaptive, from 128 KB) with a fresh mapping
and returns free memory at the top of the heap beyond its trim threshold. Serving and training both
allocate and free tensors of a few MB many times a second (a wave's (B, ...) stack, a training
step's activations and attention scores), so with glibc's defaults each of them has its pages
faulted in, 4 KB at a time, again and again: about a fifth of DKVMN's CPU per served event, and
for the attention families on the CPU as much kernel time as training's own (docs/performance.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def tune_malloc(mmap_threshold: int = 32 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Keep freed tensor memory in the heap for the next allocation instead of giving it back to the kernel.

    With both thresholds raised, the next wave's or training step's temporaries reuse the pages the
    previous one freed; the heap then keeps up to ``trim_threshold`` bytes of free memory.
    Process-wide; returns False (nothing changed) where the C library has no glibc ``mallopt``.
    """
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1 and mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1


def trim_heap() -> bool:
    """Hand the heap's free pages back to the kernel now (``malloc_trim``), so the resident set is what is live.

    Returns False where the C library has no glibc ``malloc_trim``.
    """
    malloc_trim = _glibc("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


def _glibc(name: str):
    """The C library's function ``name``, or None where it has none (not glibc, or no C library found)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None
