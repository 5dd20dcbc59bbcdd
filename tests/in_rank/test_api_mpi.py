"""The public API under MPI equals the simulator, bit for bit (run inside mpirun ranks by
tests/test_in_rank.py; every rank also computes the simulator's answer, then the ranks agree
on a pass flag before asserting)."""
import tempfile
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import mpi_teleport as mt
from mpi_teleport.examples.logistic import LogisticRegression
from helpers import without_time

# the rank counts tests/test_in_rank.py runs this file at: 4, where k = 2 and 3 are < n
# (k = n, what 2 ranks gave: tests/test_backend_threads.py, tests/test_mpi_backend_topologies.py)
RANKS = (4,)

CLOCK = dict(latency="mod:5,bw:2", clock="virtual", compute_time=20.0)
CASES = [
    ("teleportation", dict(k=3, momentum=0.9, topology="base2", **CLOCK)),
    ("teleportation", dict(k=2, variant="simple", topology="exp", **CLOCK)),
    ("dsgd", dict(momentum=0.5, **CLOCK)),
    ("search_k", dict(**CLOCK)),
    ("teleportation", dict(k=2, lr=lambda t: 0.3 / (1 + t))),
]


def agree(comm, ok: bool) -> bool:
    return comm.allreduce(bool(ok), op=MPI.LAND)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name,extra", CASES)
def test_api_under_mpi_equals_the_simulator(name, extra):
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    settings = {**dict(nodes=n, rounds=16, lr=0.3, log_every=4, seed=3), **extra}
    if "k" in settings:
        settings["k"] = min(settings["k"], n)
    run = getattr(mt, name)
    got = run(LogisticRegression(n, seed=3), comm=comm, **settings)
    # the simulator's answer, computed once (rank 0) and handed to every rank
    want = run(LogisticRegression(n, seed=3), **settings) if comm.Get_rank() == 0 else None
    want_x, want_k = comm.bcast((want.x, (want.k, want.summary["k"])) if want is not None else None)
    same_x = np.array_equal(got.x, want_x)
    same_records = comm.Get_rank() != 0 or without_time(got.records) == without_time(want.records)
    same_k = (got.k, got.summary["k"]) == want_k  # on every rank
    assert agree(comm, same_x and same_records and same_k)
    if comm.Get_rank() == 0 and "latency" in extra:
        assert all("virtual_time_s" in r for r in got.records)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_api_checkpoint_and_resume_under_mpi_equal_an_uninterrupted_run(variant):
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    base = comm.bcast(tempfile.mkdtemp(prefix="api-resume-") if rank == 0 else None)
    settings = dict(nodes=n, k=min(2, n), lr=0.3, log_every=3, seed=5, momentum=0.5,
                    variant=variant, **CLOCK)
    problem = LogisticRegression(n, seed=5)
    full = mt.teleportation(problem, comm=comm, rounds=18, **settings)
    mt.teleportation(problem, comm=comm, rounds=9, checkpoint_every=3,
                     out=Path(base) / "part", **settings)
    resumed = mt.teleportation(problem, comm=comm, rounds=18, resume=Path(base) / "part",
                               out=Path(base) / "part", **settings)
    ok = rank != 0 or (without_time(resumed.records) == without_time(full.records)
                       == without_time(mt.teleportation(problem, rounds=18, **settings).records))
    assert agree(comm, ok and np.array_equal(resumed.x, full.x))


@pytest.mark.mpi(min_size=2)
def test_the_callers_communicator_is_untouched():
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    mt.dsgd(LogisticRegression(n), comm=comm, nodes=n, rounds=4, lr=0.1)
    # a message of ours must not be left over for the caller's communicator to receive
    assert not comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
    assert agree(comm, comm.allreduce(1) == n)


@pytest.mark.mpi(min_size=2)
def test_run_settings_from_the_command_lines_flags_equal_the_apis_under_mpi():
    """A script taking the command lines' flags (mt.RunSettings.from_args, issue 44) under
    MPI: --nodes from the communicator, the same records as the API's keywords and the
    simulator's; a refusal is every rank's, in one line."""
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    flags = ["--algorithm", "teleportation", "--k", "2", "--rounds", "12", "--lr", "0.3",
             "--momentum", "0.9", "--topology", "base2", "--log-every", "3", "--seed", "3",
             "--progress", "off"]
    settings = mt.RunSettings.from_args(flags, problem=LogisticRegression(n, seed=3), comm=comm)
    got = mt.train(LogisticRegression(n, seed=3), settings, comm)
    want = mt.teleportation(LogisticRegression(n, seed=3), nodes=n, k=2, rounds=12, lr=0.3,
                            momentum=0.9, topology="base2", log_every=3, seed=3)
    sim = mt.train(LogisticRegression(n, seed=3), mt.RunSettings.from_args(
        ["--nodes", str(n), *flags], problem=LogisticRegression(n, seed=3)))
    refused = None
    try:
        mt.RunSettings.from_args(["--k", "2"], problem=LogisticRegression(n, seed=3), comm=comm)
    except mt.UsageError as exc:
        refused = str(exc)
    same = (np.array_equal(got.x, want.x) and np.array_equal(sim.x, want.x)
            and (comm.Get_rank() != 0 or without_time(got.records) == without_time(want.records)
                 == without_time(sim.records)))
    assert agree(comm, same and refused is not None and refused.startswith("--algorithm compare"))
