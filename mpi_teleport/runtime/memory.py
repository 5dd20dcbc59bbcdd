"""Allocator tuning: keep freed memory for reuse instead of returning it to the OS.

numpy arrays of a few MB are allocated and freed every round (gradient noise, gathers).
With glibc's defaults each such block is a fresh mmap, and touching it costs a page
fault per 4 KiB page -- measured here as up to half of a round of the simulator with
n = 10^4 nodes (benchmarks/bench_sim.py). Raising the mmap and trim thresholds lets
malloc recycle those blocks. Numbers are unaffected; only where memory comes from.

Also the estimate the command line checks before a run starts (:func:`check_fits`): a
run whose arrays cannot fit in this machine's memory is refused in one line.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

from ..errors import UsageError

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


# input floats per sample of each built-in network problem (8x8, 28x28, 3x32x32)
_FEATURES = {"digits": 64, "fashion-mnist": 784, "cifar10": 3072}
_QUADRATIC_VECTORS = 6  # per token in the simulator: x, v, spare, mixed, gradient, noise
_MPI_VECTORS = 10  # per rank: its token (x, v), the received ones, gradient, noise, stamps
_BATCH_COPIES = 4  # a batch's input, its activations and their gradients, roughly


def memory_bytes() -> int | None:
    """The memory this process may use: physical memory, or a lower address-space limit."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            total = min(total, soft)
    except (ImportError, ValueError, OSError):
        pass
    return total


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _tokens_here(cfg, world_size) -> int:
    """Tokens one process holds at once: one per rank under MPI; in the simulator the most
    any requested run has (k, n for DSGD and for Algorithm 2's first phase)."""
    if world_size is not None:
        return 1
    from ..disk.report import runs_requested

    most = 1
    for algorithm, k in runs_requested(cfg):
        most = max(most, cfg.nodes if algorithm == "dsgd" or k == "auto" else int(k))
    return most


def check_fits(cfg, world_size=None):
    """Refuse, with the estimate, a run whose arrays cannot fit in this machine's memory
    (before anything is allocated: numpy would fail deep inside with a traceback, or the
    kernel would kill the job). Returns ``cfg``."""
    available = memory_bytes()
    if available is None:
        return cfg
    tokens = _tokens_here(cfg, world_size)
    if cfg.problem == "quadratic":
        per = _MPI_VECTORS if world_size is not None else _QUADRATIC_VECTORS
        need = 8 * cfg.dim * (per * tokens + 2)
        if need > available:
            where = "each rank" if world_size is not None else "the simulator"
            raise UsageError(
                f"--dim {cfg.dim}: {where} needs about {_gib(need)} for {tokens} token(s) of "
                f"{cfg.dim} float64 values, more than the {_gib(available)} of memory here; "
                f"choose a smaller --dim" + ("" if world_size is not None else
                                              " or fewer tokens (--k, --nodes for dsgd)"))
    features = _FEATURES.get(cfg.problem)
    if features is not None:
        need = cfg.batch_size * (features * 4 * _BATCH_COPIES + 8)
        if need > available:
            raise UsageError(
                f"--batch-size {cfg.batch_size}: one {cfg.problem} batch needs about "
                f"{_gib(need)} ({features} float32 inputs per sample, with activations), "
                f"more than the {_gib(available)} of memory here; choose a smaller --batch-size")
    return cfg
