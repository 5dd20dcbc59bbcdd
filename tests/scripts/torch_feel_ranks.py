"""Issue 30 under MPI (run by tests/test_torch_feel_mpi.py as ``mpirun -n 2 ... OUT``):
AdamW and Adam with PyTorch schedulers, training loss and eval_every in the records, a
resume under MPI, threads="auto" -- each compared with the simulator on every rank;
prints ``ok NAME`` (rank 0) when the two are bit-identical."""
import functools
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import mpi_teleport as mt
from mpi_teleport.runtime.collective import MpiJobWarning
from mpi_teleport.problems.torch_options import core_share

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared toys
from torch_toys import C, F, blobs  # noqa: E402

warnings.simplefilter("ignore", MpiJobWarning)  # (each rank also runs the simulator, on purpose)

comm = MPI.COMM_WORLD
n = comm.size
out = Path(sys.argv[1])
S = torch.optim.lr_scheduler


def net():
    return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                               torch.nn.Linear(8, C))


def problem(local, **kw):
    return mt.TorchProblem(net, blobs(), nodes=n, seed=1, test=blobs(40, 1), batch_size=4,
                           eval_batch_size=10, local_nodes=local, **kw)


def warmup_cosine():  # as a plain script builds it on its optimizer
    opt = torch.optim.AdamW(net().parameters(), lr=0.02, weight_decay=0.05)
    return opt, S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.1, total_iters=2),
                                     S.CosineAnnealingLR(opt, T_max=6)], milestones=[2])


def adamw_warmup_cosine(mpi):
    opt, sched = warmup_cosine()
    return mt.teleportation(problem([comm.rank] if mpi else None), nodes=n, k=1, rounds=40,
                            optimizer=opt, lr=sched, log_every=4, eval_every=10,
                            comm=comm if mpi else None)


def adam_dsgd_one_cycle(mpi):
    opt = torch.optim.Adam(net().parameters(), lr=0.01)
    sched = S.OneCycleLR(opt, max_lr=0.05, total_steps=24)
    return mt.dsgd(problem([comm.rank] if mpi else None), nodes=n, rounds=24,
                   optimizer=torch.optim.Adam, lr=sched, lr_step="round", log_every=6,
                   comm=comm if mpi else None)


def adamw_resumed(mpi):
    settings = dict(nodes=n, k=1, optimizer=functools.partial(torch.optim.AdamW, lr=0.02),
                    log_every=5, eval_every=10)
    if not mpi:
        return mt.teleportation(problem(None), rounds=30, lr=warmup_cosine()[1], **settings)
    run = out / "resume"
    mt.teleportation(problem([comm.rank]), rounds=20, lr=warmup_cosine()[1], out=run,
                     checkpoint_every=7, comm=comm, **settings)
    return mt.teleportation(problem([comm.rank]), rounds=30, lr=warmup_cosine()[1], out=run,
                            resume=run, comm=comm, **settings)


def numbers(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]


for name, case, sparse in [("adamw-warmup-cosine", adamw_warmup_cosine, True),
                           ("adam-dsgd-one-cycle", adam_dsgd_one_cycle, False),
                           ("adamw-resumed", adamw_resumed, True)]:
    got, want = case(True), case(False)
    ok = (numbers(got.records) == numbers(want.records) and np.array_equal(got.x, want.x)
          and all("train_loss" in r for r in got.records[1:])  # the training loss, always
          and any("loss" not in r for r in got.records) == sparse)  # eval_every's records
    ok = comm.allreduce(bool(ok), op=MPI.LAND)
    if comm.rank == 0:
        print(("ok " if ok else "DIFFERENT ") + name, flush=True)

# threads="auto": this rank's share of the host's cores (2 ranks share this host)
p = problem([comm.rank], threads="auto")
mt.dsgd(p, nodes=n, rounds=2, lr=0.1, comm=comm, log_every=2)
ok = comm.allreduce(p.torch_settings.threads == core_share(n), op=MPI.LAND)
if comm.rank == 0:
    print(("ok " if ok else "DIFFERENT ") + "threads-auto", flush=True)
