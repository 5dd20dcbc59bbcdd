"""Issue 30 inside the ranks: AdamW with a LinearLR warm-up chained with a cosine
(SequentialLR), Adam with OneCycleLR per round in DSGD, an AdamW run interrupted and
resumed under MPI -- each bit-identical to the simulator, with the training loss in every
record and eval_every's records without evaluation -- and threads="auto" giving each
rank its share of the host. (Run inside the ranks by tests/test_in_rank.py.)"""
import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import mpi_teleport as mt
from helpers import without_time

RANKS = (4,)  # the rank counts tests/test_in_rank.py runs this file at

torch = pytest.importorskip("torch")
from torch_toys import C, F, blobs  # noqa: E402
from mpi_teleport.problems.torch_options import core_share  # noqa: E402

COMM = MPI.COMM_WORLD
S = torch.optim.lr_scheduler


def net():
    return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                               torch.nn.Linear(8, C))


def problem(local, **kw):
    return mt.TorchProblem(net, blobs(), nodes=COMM.size, seed=1, test=blobs(40, 1),
                           batch_size=4, eval_batch_size=10, local_nodes=local, **kw)


def on(mpi):
    return dict(nodes=COMM.size, comm=COMM if mpi else None)


def warmup_cosine():  # as a plain script builds it on its optimizer
    opt = torch.optim.AdamW(net().parameters(), lr=0.02, weight_decay=0.05)
    return opt, S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.1, total_iters=2),
                                     S.CosineAnnealingLR(opt, T_max=6)], milestones=[2])


def adamw_warmup_cosine(mpi):
    opt, sched = warmup_cosine()
    return mt.teleportation(problem([COMM.rank] if mpi else None), k=1, rounds=40,
                            optimizer=opt, lr=sched, log_every=4, eval_every=10, **on(mpi))


def adam_dsgd_one_cycle(mpi):
    opt = torch.optim.Adam(net().parameters(), lr=0.01)
    sched = S.OneCycleLR(opt, max_lr=0.05, total_steps=24)
    return mt.dsgd(problem([COMM.rank] if mpi else None), rounds=24,
                   optimizer=torch.optim.Adam, lr=sched, lr_step="round", log_every=6,
                   **on(mpi))


def adamw_resumed(mpi):
    settings = dict(k=1, optimizer=functools.partial(torch.optim.AdamW, lr=0.02),
                    log_every=5, eval_every=10, **on(mpi))
    if not mpi:
        return mt.teleportation(problem(None), rounds=30, lr=warmup_cosine()[1], **settings)
    out = Path(COMM.bcast(tempfile.mkdtemp(prefix="feel-resume-") if COMM.rank == 0
                          else None)) / "resume"
    mt.teleportation(problem([COMM.rank]), rounds=20, lr=warmup_cosine()[1], out=out,
                     checkpoint_every=7, **settings)
    return mt.teleportation(problem([COMM.rank]), rounds=30, lr=warmup_cosine()[1], out=out,
                            resume=out, **settings)


CASES = {"adamw-warmup-cosine": (adamw_warmup_cosine, True),
         "adam-dsgd-one-cycle": (adam_dsgd_one_cycle, False),
         "adamw-resumed": (adamw_resumed, True)}


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", CASES)
def test_optimizers_schedulers_and_training_records_equal_the_simulator(name):
    case, sparse = CASES[name]
    got, want = case(True), case(False)  # (communicate first, assert after)
    ok = (without_time(got.records) == without_time(want.records)
          and np.array_equal(got.x, want.x)
          and all("train_loss" in r for r in got.records[1:])  # the training loss, always
          and any("loss" not in r for r in got.records) == sparse)  # eval_every's records
    assert COMM.allreduce(bool(ok), op=MPI.LAND)


@pytest.mark.mpi(min_size=2)
def test_threads_auto_is_this_ranks_share_of_the_host():
    """Every rank of the job runs on this host here: each gets 1/size of its cores."""
    before = torch.get_num_threads()
    try:
        p = problem([COMM.rank], threads="auto")
        mt.dsgd(p, rounds=2, lr=0.1, log_every=2, **on(True))
        ok = p.torch_settings.threads == core_share(COMM.size)
    finally:
        torch.set_num_threads(before)
    assert COMM.allreduce(bool(ok), op=MPI.LAND)
