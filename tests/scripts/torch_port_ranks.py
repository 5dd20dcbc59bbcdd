"""Issue 22 under MPI (run by tests/test_torch_port_mpi.py as ``mpirun -n 2``): each case
runs through the API with ``comm`` and in the simulator (on every rank, the records
compared on rank 0) and prints ``ok NAME`` when the two are bit-identical."""
import os
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the test models
import mpi_teleport as mt  # noqa: E402
from test_torch_port import Noisy, blobs, frozen_mlp, metric_problem, mlp  # noqa: E402
from mpi_teleport.problems.torch_problem import TorchProblem  # noqa: E402

comm = MPI.COMM_WORLD
n = comm.size


def numbers(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]


def augment(inputs, generator):
    return inputs + 0.3 * torch.randn(inputs.shape, generator=generator)


def noisy(local):
    return TorchProblem(mlp, Noisy(), nodes=n, seed=5, test=Noisy(30), batch_size=4,  # (a
                        alpha=1.0, augment=augment, local_nodes=local, eval_batch_size=8)  # test
    # set that draws too: each chunk keyed, whichever rank evaluates it)


def metrics(local):
    return metric_problem(nodes=n, local_nodes=local)


def frozen(local):  # no test set: the training loss on a fixed sample, shared by the ranks
    return TorchProblem(frozen_mlp, blobs(300), nodes=n, seed=2, alpha=1.0, weight_decay=0.01,
                        clip_norm=1.0, partition="iid", eval_batch_size=64, local_nodes=local)


def frozen_device(local):  # the MPI side holds tokens as torch tensors (device path)
    return TorchProblem(frozen_mlp, blobs(300), nodes=n, seed=2, alpha=1.0, partition="iid",
                        eval_batch_size=64, local_nodes=local, device_tokens=local is not None)


CASES = [
    ("augmentation", noisy, mt.teleportation, dict(k=1, rounds=6, lr=0.1, log_every=2)),
    ("augmentation-dsgd", noisy, mt.dsgd, dict(rounds=4, lr=0.1, log_every=2, momentum=0.5)),
    ("custom-metrics-search", metrics, mt.search_k, dict(rounds=4, lr=0.1, log_every=2)),
    ("frozen-train-sample", frozen, mt.dsgd, dict(epochs=1, lr=0.1, log_every=5)),
    ("nesterov", frozen, mt.teleportation,
     dict(k=1, rounds=6, lr=0.1, momentum=0.9, nesterov=True, log_every=3)),
    ("nesterov-device-tokens", frozen_device, mt.dsgd,
     dict(rounds=6, lr=0.1, momentum=0.9, nesterov=True, log_every=3)),
]

ONLY = os.environ.get("TORCH_PORT_CASES")  # (debugging: a comma-separated subset)
if ONLY:
    CASES = [c for c in CASES if c[0] in ONLY.split(",")]
for name, build, run, settings in CASES:
    seen = []
    got = run(build([comm.rank]), nodes=n, comm=comm, callback=seen.append, **settings)
    want = run(build(None), nodes=n, **settings)
    ok = (numbers(got.records) == numbers(want.records) and got.k == want.k
          and np.array_equal(got.x, want.x)
          and (seen == got.records if comm.rank == 0 else seen == []))
    ok = comm.allreduce(bool(ok), op=MPI.LAND)
    if comm.rank == 0:
        print(("ok " if ok else "DIFFERENT ") + name, flush=True)
