"""Test harness: serial tests run in-process; MPI tests run under mpirun with a hard
timeout, so a deadlock fails a test instead of hanging CI.

* ``mpirun(n, args, timeout)`` runs ``python <args>`` on n ranks and returns the
  CompletedProcess (stdout/stderr captured); the timeout kills the whole process group.
* tests/mpi/ holds pytest-mpi tests that run *inside* ranks; tests/test_mpi_suite.py
  launches them with ``python -m mpi4py -m pytest --with-mpi`` (one pytest runs both tiers).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_teleport.launch import find_mpirun, mpi_env, mpirun_command

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: needs the local SLURM (jobs/local-cluster.sh)")
    config.addinivalue_line("markers", "torch: needs torch/torchvision")


def run_mpi(n: int, args: list[str], timeout: float = 120, cwd=None, env=None) -> subprocess.CompletedProcess:
    cmd = mpirun_command(n, [sys.executable, *args], find_mpirun())
    full_env = mpi_env(env)
    full_env.setdefault("PYTHONPATH", str(ROOT))
    full_env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.Popen(cmd, cwd=cwd or ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = rank_stacks(proc.pid)  # where each rank is blocked, before killing them
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpirun -n {n} {' '.join(args)} hung for {timeout}s (deadlock?)\n"
                    f"{err[-2000:]}\n{stacks}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def rank_stacks(pgid: int) -> str:
    """Python stacks of the ranks (the Python processes in mpirun's session), via py-spy when it
    is installed (pip install py-spy): a timed-out MPI test then says where it was stuck."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return "(pip install py-spy to see the ranks' stacks on a timeout)"
    try:
        pids = subprocess.run(["pgrep", "-s", str(pgid)], capture_output=True, text=True,
                              timeout=10).stdout.split()  # the session mpirun started
    except (OSError, subprocess.SubprocessError) as exc:
        return f"(no stacks: {exc})"
    pids = [p for p in pids if "python" in os.path.basename(os.path.realpath(f"/proc/{p}/exe"))]
    dumps = []
    for pid in pids:
        try:
            res = subprocess.run([spy, "dump", "--pid", pid], capture_output=True, text=True,
                                 timeout=20)
            dumps.append(f"--- pid {pid}\n{res.stdout[-3000:]}{res.stderr[-500:]}")
        except (OSError, subprocess.SubprocessError) as exc:
            dumps.append(f"--- pid {pid}: {exc}")
    return "\n".join(dumps)


@pytest.fixture
def mpirun():
    return run_mpi
