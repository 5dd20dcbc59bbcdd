"""The memory this process may use: what every memory check compares against (the
settings' estimate, :func:`mpi_teleport.session.preflight.check_fits`, and the trace's
buffer, :func:`mpi_teleport.trace.tracer.check_buffer`)."""
from __future__ import annotations

import os


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
