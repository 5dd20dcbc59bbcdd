"""Collective failure of API calls under MPI (mpi_teleport/runtime/collective.py): an exception on
one rank ends the whole job promptly with that rank's message, however the script was
started and whether or not it catches the exception; what the ranks can agree on at
start (a gradient failing at the initial model, ranks with different initial models, a
communicator no run can use) is one UsageError on every rank, catchable. Each job runs
under a hard timeout (a hang fails the test); the user script is tests/scripts/api_faults.py.
"""
from __future__ import annotations

import json

import pytest

SCRIPT = "tests/scripts/api_faults.py"
TIMEOUT = 90  # a hang fails the test


def _launch(mpirun, n, fault, *extra, module=False):
    args = (["-m", "mpi4py"] if module else []) + [SCRIPT, fault, *extra]
    return mpirun(n, args, timeout=TIMEOUT)


@pytest.mark.mpi_tier  # MPI_Abort's reach: the implementation's own path
@pytest.mark.parametrize("n, module, catch", [
    (2, False, False), (3, False, True), (2, True, True), (3, True, False)],
    ids=["2-python-script-uncaught", "3-python-script-caught", "2-python-m-mpi4py-caught",
         "3-python-m-mpi4py-uncaught"])
def test_gradient_raising_on_one_rank_mid_run_ends_the_job(mpirun, n, module, catch):
    res = _launch(mpirun, n, "raise-late", *(["catch"] if catch else []), module=module)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "[rank 1]" in res.stderr and "boom in gradient on rank 1" in res.stderr
    assert "caught" not in res.stdout  # no rank went on as if the call had returned


def test_gradient_raising_at_the_start_is_one_usage_error_on_every_rank(mpirun):
    res = _launch(mpirun, 3, "raise-first", "catch")
    assert res.returncode == 0, res.stderr
    said = ("caught UsageError: Mean.gradient() of node 1 raised ValueError: boom at the "
            "start on rank 1 (at the initial model, round 0) (on rank 1 only)")
    assert res.stdout.count(said) == 3, res.stdout  # (ranks' lines may interleave)


def test_ranks_with_different_initial_models_are_named(mpirun):
    res = _launch(mpirun, 3, "unseeded", "catch")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("caught UsageError: initial() (the initial model) differs between "
                            "ranks: ranks 1, 2 differ from rank 0; build the problem from the "
                            "same seed") == 3, res.stdout


def test_ranks_with_different_initial_models_uncaught_exit_non_zero(mpirun):
    res = _launch(mpirun, 2, "unseeded")
    assert res.returncode != 0
    assert "UsageError" in res.stderr and "rank 1 differs from rank 0" in res.stderr


def test_an_argument_refused_on_one_rank_only_is_raised_on_every_rank(mpirun):
    res = _launch(mpirun, 2, "resume-one-rank", "catch")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("caught UsageError: resume=") == 2, res.stdout
    assert res.stdout.count("/nonexistent/mpi_teleport/run") == 2, res.stdout


@pytest.mark.parametrize("fault, words", [
    ("intercomm", "intercommunicator"),
    ("comm-null", "freed or null communicator"),
    ("not-a-comm", "expected an mpi4py communicator"),
])
def test_unusable_communicators_are_one_line_on_every_rank(mpirun, fault, words):
    res = _launch(mpirun, 2, fault, "catch")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("caught UsageError: ") == 2 and res.stdout.count(words) == 2, \
        res.stdout


def test_gradient_returning_a_new_array_trains_under_mpi_as_in_the_simulator(mpirun):
    mpi = _launch(mpirun, 3, "new-array")
    assert mpi.returncode == 0, mpi.stderr
    sim = _launch(mpirun, 1, "new-array", "sim=3")
    assert sim.returncode == 0, sim.stderr
    errors = json.loads(mpi.stdout.strip().splitlines()[-1])
    assert errors == json.loads(sim.stdout.strip().splitlines()[-1])
    assert len(set(errors)) == len(errors)  # it trains (before: every error identical)


def test_the_simulator_inside_an_mpi_job_warns(mpirun):
    res = _launch(mpirun, 2, "comm-none")
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("MpiJobWarning") == 2 and "comm=MPI.COMM_WORLD" in res.stderr


# Issue 31, classes 4 and 5: a refusal that is a pure function of what every rank shares
# (a topology function that fails at the start or turns invalid mid-run, a step-size
# function that turns negative mid-run) was a traceback, or MPI_Abort once running, and a
# second API call in the job was impossible. Now every rank raises the same UsageError as
# the simulator's and the script's next call on the same communicator runs.
REFUSALS = "tests/scripts/api_refusals.py"


REFUSED = {
    "topology-late": "topology function late_ring(k=2, t=5) returned a matrix that is not "
                     "doubly stochastic",
    "topology-start": "topology function words(k=2, t=0) returned a list that is not an array",
    "lr-late": "lr(5) returned -0.1",
    "search-topology-late": "<lambda>(k=1, t=17) returned a matrix that is not doubly",
}


def test_shared_refusals_mid_run_are_one_usage_error_and_the_next_call_runs(mpirun):
    """Every fault in turn in one job of 3 ranks, each followed by a valid call."""
    import os
    import subprocess
    import sys

    from helpers import ROOT

    res = mpirun(3, [REFUSALS, "all"], timeout=TIMEOUT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "MPI_Abort" not in res.stderr and "Traceback" not in res.stderr
    sim = subprocess.run([sys.executable, REFUSALS, "all", "sim=3"], cwd=ROOT, capture_output=True,
                         text=True, timeout=TIMEOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = res.stdout.splitlines()
    for fault, words in REFUSED.items():
        refused = sorted(line for line in lines if line.split(" refused: ")[0].endswith(f" {fault}"))
        assert [line.split(" ")[1] for line in refused] == ["0", "1", "2"], (fault, res.stdout)
        messages = {line.split(" refused: ", 1)[1] for line in refused}
        assert len(messages) == 1 and words in next(iter(messages)), refused
        assert f"rank 0 {fault} refused: {next(iter(messages))}" in sim.stdout.splitlines()
        assert sorted(line for line in lines if line.startswith("rank ") and
                      f" {fault} second call" in line) == [
            f"rank {r} {fault} second call: k=2" for r in range(3)]
