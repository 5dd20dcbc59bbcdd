"""Allocator tuning: keep freed memory for reuse instead of returning it to the OS.

numpy arrays of a few MB are allocated and freed every round (gradient noise, gathers).
With glibc's defaults each such block is a fresh mmap, and touching it costs a page
fault per 4 KiB page -- measured here as up to half of a round of the simulator with
n = 10^4 nodes (benchmarks/bench_sim.py). Raising the mmap and trim thresholds lets
malloc recycle those blocks. Numbers are unaffected; only where memory comes from. (The memory estimate the command
line checks before a run: :func:`mpi_teleport.session.preflight.check_fits`.)
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Tune glibc malloc once per process; returns False where that is not possible."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20) == 1  # 32 MiB: glibc's maximum
        ok &= libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20) == 1
        return bool(ok)
    except (OSError, AttributeError):  # not glibc (macOS, musl): keep the defaults
        return False
