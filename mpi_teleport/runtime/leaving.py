"""How the processes of a job leave together after an end they all agreed on (a refusal
every rank made, a signal's stop at the agreed round), so that the launcher reports the
status alone.

Open MPI's launcher prints a six-line banner ("prterun detected that one or more
processes exited with non-zero status ...") as soon as one process exits non-zero while
others still run, even when every one of them finalised MPI and exits with the same
status on purpose; ``MPI_Abort`` prints another. Neither says anything the run's own
line has not said. So after an agreed end every process finalises MPI, the others exit
0, and rank 0 exits last with the status (it waits until the others on its host are
gone; a moment for those on other hosts): the launcher sees one non-zero exit, the last,
and returns it (``mpirun``, Hydra's ``mpiexec`` and ``srun`` return the largest status
of the job) without a banner. ``MPI_Abort`` stays for a failure on one process alone,
which the others cannot learn of.
"""
from __future__ import annotations

import gc
import os
import sys
import time

REMOTE_GRACE_S = 0.3  # for processes on other hosts, whose exit rank 0 cannot see
LOCAL_WAIT_S = 20.0  # at most, for those on its host (their interpreters' exits)


def leave_together(status: int) -> None:
    """End this process after an end every process of ``MPI.COMM_WORLD`` reached at the
    same point with the same ``status`` (a collective): the ordered exit above. Outside
    a job of several processes, or with status 0, an ordinary exit."""
    world = _world()
    if world is None or world.Get_size() == 1 or status == 0:
        sys.exit(status)
    MPI = sys.modules["mpi4py.MPI"]  # (imported: _world found it initialised)

    rank, here = world.Get_rank(), MPI.Get_processor_name()
    peers = world.gather((here, os.getpid()), root=0)
    _flush()
    gc.collect()  # (requests the run left to the collector are freed before MPI is)
    MPI.Finalize()
    if rank != 0:
        sys.exit(0)
    others = [pid for host, pid in peers[1:] if host == here]
    # Open MPI's launcher reaps its processes at once: gone is gone for it. Hydra's
    # proxies reap them only at the end (no banner to avoid there): exited is enough.
    _wait_gone(others, LOCAL_WAIT_S, reaped="OMPI_COMM_WORLD_SIZE" in os.environ)
    time.sleep(REMOTE_GRACE_S if len(others) < len(peers) - 1 else 0.05)
    sys.exit(status)


def _world():
    """MPI.COMM_WORLD where MPI is initialised and not finalised (else None)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    return mpi.COMM_WORLD


def _wait_gone(pids: list[int], timeout: float, reaped: bool) -> None:
    """Until every process of ``pids`` has exited (``reaped``: and its parent, the
    launcher's daemon, has collected it) or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if _running(pid, reaped)]
        if left:
            time.sleep(0.01)


def _running(pid: int, reaped: bool) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if reaped:
        return True
    try:  # (a zombie has exited)
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
