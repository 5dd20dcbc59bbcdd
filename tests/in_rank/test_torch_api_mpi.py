"""A user's torch model through the public API only: Teleportation (Alg. 3 and Alg. 1),
DSGD and search_k, checkpoint + resume and the virtual clock, under mpirun equal to the
simulator bit for bit. The model and data are defined here, not in the package.
(Run inside the ranks by tests/test_in_rank.py.)"""
import tempfile
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import mpi_teleport as mt
from helpers import without_time

# the rank counts tests/test_in_rank.py runs this file at: 4, where k = 2 and 3 are < n
# (k = n, what 2 ranks gave: tests/test_backend_threads.py, tests/test_mpi_backend_topologies.py)
RANKS = (4,)

torch = pytest.importorskip("torch")


class TinyNet(torch.nn.Module):
    """A user's model: with BatchNorm (floating buffers travel in the token) and dropout
    (random layers must draw the same numbers in every back end)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.BatchNorm1d(12),
                                        torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                        torch.nn.Linear(12, 3))

    def forward(self, x):
        return self.body(x)


def blobs(n_samples: int, seed: int):
    gen = np.random.default_rng(seed)
    y = gen.integers(0, 3, n_samples)
    x = gen.normal(size=(n_samples, 5)).astype(np.float32) + y[:, None].astype(np.float32)
    return x, y


def make_problem(nodes):
    return mt.TorchProblem(TinyNet, blobs(240, 1), test=blobs(90, 2), nodes=nodes, seed=7,
                           alpha=1.0, batch_size=8, validation_fraction=0.2,
                           eval_batch_size=32)


CLOCK = dict(latency="mod:5,bw:1", clock="virtual", compute_time=40.0)
CASES = [
    ("teleportation", dict(k=2, momentum=0.9, **CLOCK)),
    ("teleportation", dict(k=3, variant="simple", topology="complete", **CLOCK)),
    ("dsgd", dict(momentum=0.5, **CLOCK)),
    ("search_k", dict(**CLOCK)),
]


def agree(comm, ok) -> bool:
    return comm.allreduce(bool(ok), op=MPI.LAND)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name,extra", CASES)
def test_torch_model_under_mpi_equals_the_simulator(name, extra):
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    settings = {**dict(nodes=n, rounds=10, lr=0.05, log_every=5), **extra}
    if "k" in settings:
        settings["k"] = min(settings["k"], n)
    run = getattr(mt, name)
    got = run(make_problem(n), comm=comm, **settings)
    # the simulator's answer, computed once (rank 0) and handed to every rank
    want = run(make_problem(n), **settings) if comm.Get_rank() == 0 else None
    want_x = comm.bcast(want.x if want is not None else None)
    ok = comm.Get_rank() != 0 or (without_time(got.records) == without_time(want.records)
                                   and got.k == want.k
                                   and all("virtual_time_s" in r for r in got.records))
    assert agree(comm, ok and np.array_equal(got.x, want_x))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_torch_checkpoint_and_resume_equal_an_uninterrupted_run(variant):
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    base = Path(comm.bcast(tempfile.mkdtemp(prefix="torch-resume-") if rank == 0 else None))
    settings = dict(nodes=n, k=min(2, n), lr=0.05, momentum=0.9, variant=variant, log_every=2,
                    **CLOCK)
    full = mt.teleportation(make_problem(n), comm=comm, rounds=8, **settings)
    mt.teleportation(make_problem(n), comm=comm, rounds=4, checkpoint_every=2,
                     out=base / "part", **settings)
    resumed = mt.teleportation(make_problem(n), comm=comm, rounds=8, resume=base / "part",
                               out=base / "part", **settings)
    ok = rank != 0 or without_time(resumed.records) == without_time(full.records) == without_time(
        mt.teleportation(make_problem(n), rounds=8, **settings).records)  # (the simulator: rank 0)
    assert agree(comm, ok and np.array_equal(resumed.x, full.x))
