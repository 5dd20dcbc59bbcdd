"""Evaluation shared by the ranks: each rank holds only its node's training share and its
slice of the test and validation sets (``local_nodes=[rank]``), evaluates its slice, and
the records equal the simulator's (one process evaluating everything) bit for bit.
(Run inside the ranks by tests/test_in_rank.py with 4 ranks.)"""
import numpy as np
import pytest
from mpi4py import MPI

import mpi_teleport as mt
from mpi_teleport.core.evaluation import chunk_slices
from helpers import without_time

# the rank counts tests/test_in_rank.py runs this file at: 4, where the slices are uneven
# (100 + 100 + 100 + 60 test, 50 + 50 + 44 + 0 validation samples: one rank's is empty);
# every split of chunk_slices itself: tests/test_shared_evaluation.py
RANKS = (4,)

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")


def digits_problem(nodes, local_nodes=None):
    """The digits CNN with small evaluation chunks (50 samples): the test set (360) and
    the validation set (144) span several chunks, so every rank has a slice."""
    from mpi_teleport.problems import datasets, models

    return mt.TorchProblem(models.build_model("digits-cnn", 0),
                           datasets.load_digits_dataset(True, seed=0), nodes=nodes, seed=3,
                           alpha=0.5, batch_size=16,
                           test=datasets.load_digits_dataset(False, seed=0),
                           validation_fraction=0.1, n_classes=10, eval_batch_size=50,
                           local_nodes=local_nodes)


def agree(comm, ok) -> bool:
    return comm.allreduce(bool(ok), op=MPI.LAND)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("name,extra", [("teleportation", dict(k=2, momentum=0.9)),
                                        ("dsgd", dict()),
                                        ("search_k", dict())])
def test_each_rank_holds_its_part_and_records_equal_the_simulator(name, extra):
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    settings = {**dict(nodes=n, rounds=6, lr=0.05, log_every=3), **extra}
    if "k" in settings:
        settings["k"] = min(settings["k"], n)
    mine = digits_problem(n, local_nodes=[rank])
    whole = digits_problem(n)
    lo, hi = chunk_slices(whole.n_test, 50, n)[rank]
    held = mine.held_slice("test") == (lo, hi) and mine.n_test == whole.n_test
    share = len(mine._train) == len(whole.parts[rank])
    run = getattr(mt, name)
    got = run(mine, comm=comm, **settings)
    # the simulator's answer, computed once (rank 0) and handed to every rank
    want = run(whole, **settings) if rank == 0 else None
    want_x = comm.bcast(want.x if want is not None else None)
    ok = rank != 0 or (without_time(got.records) == without_time(want.records) and got.k == want.k
                       and got.candidates == want.candidates)
    assert agree(comm, held and share), "a rank keeps more than its share and slice"
    assert agree(comm, ok and np.array_equal(got.x, want_x))


@pytest.mark.mpi(min_size=1)
def test_chunks_of_ten_over_four_ranks_equal_the_simulator_from_round_0():
    """Issue 47's finding: 40 test samples in chunks of 10, each rank's chunk from its own
    copy; round 0's loss differed in its last digits until batches started aligned
    (tests/test_torch_alignment.py)."""
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    gen = np.random.default_rng(1)
    y = gen.integers(0, 3, 136)
    x = (gen.standard_normal((136, 5)) + y[:, None]).astype(np.float32)

    def net():
        return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))

    def blobs(local):
        return mt.TorchProblem(net, (x[:96], y[:96]), nodes=n, seed=1, test=(x[96:], y[96:]),
                               batch_size=4, eval_batch_size=10, local_nodes=local)

    settings = dict(nodes=n, k=1, rounds=4, lr=0.1, log_every=2)
    got = mt.teleportation(blobs([rank]), comm=comm, **settings)
    want = mt.teleportation(blobs(None), **settings) if rank == 0 else None
    assert agree(comm, rank != 0 or without_time(got.records) == without_time(want.records))
