"""Issue 22 inside the ranks: keyed augmentation (a Dataset transform drawing from the
global generators and the augment hook), custom EvalMetrics as the headline and
search_k's selection, frozen parameters with weight decay and clipping and the
training-sample evaluation with per-rank data, Nesterov momentum (host and device token
paths) -- each through the API with ``comm`` bit-identical to the simulator, and the
callback called on the root only. (Run inside the ranks by tests/test_in_rank.py.)"""
import numpy as np
import pytest
from mpi4py import MPI

import mpi_teleport as mt
from helpers import without_time

RANKS = (4,)  # the rank counts tests/test_in_rank.py runs this file at

torch = pytest.importorskip("torch")
from test_torch_port import Noisy, blobs, frozen_mlp, metric_problem, mlp  # noqa: E402
from mpi_teleport.problems.torch_problem import TorchProblem  # noqa: E402

COMM = MPI.COMM_WORLD


def augment(inputs, generator):
    return inputs + 0.3 * torch.randn(inputs.shape, generator=generator)


def noisy(local):  # (a test set that draws too: each chunk keyed, whichever rank evaluates it)
    return TorchProblem(mlp, Noisy(), nodes=COMM.size, seed=5, test=Noisy(30), batch_size=4,
                        alpha=1.0, augment=augment, local_nodes=local, eval_batch_size=8)


def metrics(local):
    return metric_problem(nodes=COMM.size, local_nodes=local)


def frozen(local):  # no test set: the training loss on a fixed sample, shared by the ranks
    return TorchProblem(frozen_mlp, blobs(300), nodes=COMM.size, seed=2, alpha=1.0,
                        weight_decay=0.01, clip_norm=1.0, partition="iid", eval_batch_size=64,
                        local_nodes=local)


def frozen_device(local):  # the MPI side holds tokens as torch tensors (device path)
    return TorchProblem(frozen_mlp, blobs(300), nodes=COMM.size, seed=2, alpha=1.0,
                        partition="iid", eval_batch_size=64, local_nodes=local,
                        device_tokens=local is not None)


CASES = {
    "augmentation": (noisy, mt.teleportation, dict(k=1, rounds=6, lr=0.1, log_every=2)),
    "augmentation-dsgd": (noisy, mt.dsgd, dict(rounds=4, lr=0.1, log_every=2, momentum=0.5)),
    "custom-metrics-search": (metrics, mt.search_k, dict(rounds=4, lr=0.1, log_every=2)),
    "frozen-train-sample": (frozen, mt.dsgd, dict(epochs=1, lr=0.1, log_every=5)),
    "nesterov": (frozen, mt.teleportation,
                 dict(k=1, rounds=6, lr=0.1, momentum=0.9, nesterov=True, log_every=3)),
    "nesterov-device-tokens": (frozen_device, mt.dsgd,
                               dict(rounds=6, lr=0.1, momentum=0.9, nesterov=True, log_every=3)),
}


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", CASES)
def test_ported_script_features_under_mpi_equal_the_simulator(name):
    build, run, settings = CASES[name]
    seen = []
    got = run(build([COMM.rank]), nodes=COMM.size, comm=COMM, callback=seen.append, **settings)
    want = run(build(None), nodes=COMM.size, **settings)  # (communicate first, assert after)
    ok = (without_time(got.records) == without_time(want.records) and got.k == want.k
          and np.array_equal(got.x, want.x)
          and (seen == got.records if COMM.rank == 0 else seen == []))
    assert COMM.allreduce(bool(ok), op=MPI.LAND)
