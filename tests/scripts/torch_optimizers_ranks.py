"""Issue 47 under MPI (run by tests/test_optimizers_mpi.py as ``mpirun -n 4 ... OUT``): any
torch optimizer -- Adadelta under Teleportation, RMSprop under DSGD, a third-party-style
subclass, an Adadelta run interrupted and resumed under MPI, and Adadelta under the
latency layer's virtual clock (both variants; one launch, so each case costs little) --
each compared with the
simulator on every rank; prints ``ok NAME`` (rank 0) when the two are bit-identical."""
import functools
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import mpi_teleport as mt
from mpi_teleport.runtime.collective import MpiJobWarning

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared toys
from torch_toys import Lion, blobs, bn_net  # noqa: E402

warnings.simplefilter("ignore", MpiJobWarning)  # (each rank also runs the simulator, on purpose)
torch.set_num_threads(1)

comm = MPI.COMM_WORLD
n = comm.size
out = Path(sys.argv[1])


def problem(local):
    return mt.TorchProblem(bn_net, blobs(), nodes=n, seed=1, test=blobs(40, 1), batch_size=4,
                           local_nodes=local)


def on(mpi):
    return dict(comm=comm if mpi else None)


def adadelta_teleportation(mpi):
    return mt.teleportation(problem([comm.rank] if mpi else None), nodes=n, k=2, rounds=8,
                            optimizer=torch.optim.Adadelta, log_every=4, **on(mpi))


def rmsprop_dsgd(mpi):
    opt = torch.optim.RMSprop(bn_net().parameters(), lr=0.01, momentum=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    return mt.dsgd(problem([comm.rank] if mpi else None), nodes=n, rounds=8, optimizer=opt,
                   lr=sched, log_every=4, **on(mpi))


def lion_teleportation(mpi):
    return mt.teleportation(problem([comm.rank] if mpi else None), nodes=n, k=3, rounds=8,
                            optimizer=functools.partial(Lion, lr=0.01, weight_decay=0.1),
                            log_every=4, **on(mpi))


def adadelta_resumed(mpi):
    settings = dict(nodes=n, k=2, optimizer=torch.optim.Adadelta, log_every=4)
    if not mpi:
        return mt.teleportation(problem(None), rounds=14, **settings)
    run = out / "resume"
    mt.teleportation(problem([comm.rank]), rounds=8, out=run, checkpoint_every=5, comm=comm,
                     **settings)
    return mt.teleportation(problem([comm.rank]), rounds=14, out=run, resume=run, comm=comm,
                            **settings)


def adadelta_latency(mpi, variant):  # (two state vectors a token: the clock's state message)
    return mt.teleportation(problem([comm.rank] if mpi else None), nodes=n, k=2, rounds=8,
                            optimizer=torch.optim.Adadelta, log_every=4, variant=variant,
                            latency="const:5,bw:1", clock="virtual", compute_time=10, **on(mpi))


def numbers(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]


for name, case in [("adadelta-teleportation", adadelta_teleportation),
                   ("rmsprop-dsgd", rmsprop_dsgd), ("lion-teleportation", lion_teleportation),
                   ("adadelta-resumed", adadelta_resumed),
                   ("adadelta-latency-overlap", lambda mpi: adadelta_latency(mpi, "overlap")),
                   ("adadelta-latency-simple", lambda mpi: adadelta_latency(mpi, "simple"))]:
    got, want = case(True), case(False)
    ok = numbers(got.records) == numbers(want.records) and np.array_equal(got.x, want.x)
    if not ok and comm.rank == 0 and "-v" in sys.argv:
        print(name, np.abs(got.x - want.x).max(), numbers(got.records)[:2], numbers(want.records)[:2], flush=True)
    ok = comm.allreduce(bool(ok), op=MPI.LAND)
    if comm.rank == 0:
        print(("ok " if ok else "DIFFERENT ") + name, flush=True)
