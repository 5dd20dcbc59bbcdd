"""A run with device tokens (torch tensors, here on the CPU) records what the host path
and the simulator record, bit for bit. (Run inside the ranks by tests/test_in_rank.py.)"""
import numpy as np
import pytest
from mpi4py import MPI

import mpi_teleport as mt
from helpers import without_time

RANKS = (4,)  # the rank counts tests/test_in_rank.py runs this file at (k = 2, 3 < n)

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")


def digits_problem(nodes, rank, device_tokens, device="cpu"):
    from mpi_teleport.problems import datasets, models

    return mt.TorchProblem(models.build_model("digits-cnn", 0),
                           datasets.load_digits_dataset(True, seed=0), nodes=nodes, seed=3,
                           alpha=0.5, batch_size=16,
                           test=datasets.load_digits_dataset(False, seed=0), n_classes=10,
                           eval_batch_size=100, local_nodes=None if rank is None else [rank],
                           device_tokens=device_tokens, device=device)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("extra", [dict(k=2, momentum=0.9), dict(k=3, momentum=0.5, variant="simple")])
def test_device_tokens_equal_the_host_path_and_the_simulator(extra, device):
    """Tokens as torch tensors on ``device`` (on a GPU staged through pinned host buffers;
    the ranks share the machine's GPU(s), rank -> device by local rank) record what tokens
    on the host record, and what the simulator on the same device records, bit for bit.
    (On a GPU the simulator once differed in the last bits: its batches, taken from the
    whole data set, reached the GPU in a channels-last layout; torch_data.to_device now
    copies in the standard one. benchmarks/README.md, "On a GPU".)"""
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    settings = {**dict(nodes=n, rounds=6, lr=0.05, log_every=3), **extra}
    settings["k"] = min(settings["k"], n)
    on_device = digits_problem(n, rank, True, device)
    assert on_device.token_device.startswith(device)
    got = mt.teleportation(on_device, comm=comm, **settings)
    host = mt.teleportation(digits_problem(n, rank, False, device), comm=comm, **settings)
    # the simulator's answer, computed once (rank 0) and handed to every rank
    want = mt.teleportation(digits_problem(n, None, False, device), **settings) if rank == 0 else None
    want_x = comm.bcast(want.x if want is not None else None)
    same = rank != 0 or (without_time(got.records) == without_time(host.records) == without_time(want.records))
    if rank == 0 and device != "cpu":  # (what gpu_check.sh reports)
        print(f"\nGPU {extra}: device tokens = host tokens: {np.array_equal(got.x, host.x)}; simulator on "
              f"the GPU: x equal {np.array_equal(got.x, want_x)}, largest |difference| "
              f"{float(np.abs(got.x - want_x).max()):.3g}; records equal {same}")
    assert comm.allreduce(bool(same and np.array_equal(got.x, host.x) and np.array_equal(got.x, want_x)),
                          op=MPI.LAND)
