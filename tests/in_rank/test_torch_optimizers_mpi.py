"""Issue 47 inside the ranks: any torch optimizer -- Adadelta under Teleportation, RMSprop
with a StepLR under DSGD, a third-party-style subclass (Lion), an Adadelta run
interrupted and resumed under MPI, and Adadelta under the latency layer's virtual clock
(both variants: its two state vectors one message) -- each bit-identical to the
simulator, computed on every rank; and named on a script's command line (``--optimizer
adadelta --lr-scheduler StepLR``, a dotted ``torch_toys.Lion``, with their arguments,
through ``RunSettings.from_args(comm="auto")``) equal to the keyword API's run. (Run inside the ranks by tests/test_in_rank.py, in the
job whose ranks have imported torch already.)"""
import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import mpi_teleport as mt
from helpers import without_time

RANKS = (4,)  # the rank counts tests/test_in_rank.py runs this file at (k = 2, 3 < n)

torch = pytest.importorskip("torch")
from torch_toys import Lion, blobs, bn_net  # noqa: E402

COMM = MPI.COMM_WORLD


def problem(local):
    return mt.TorchProblem(bn_net, blobs(), nodes=COMM.size, seed=1, test=blobs(40, 1),
                           batch_size=4, local_nodes=local)


def run(mpi, method, **settings):
    """One run on the ranks (mpi) or all of it in this process (the simulator)."""
    return getattr(mt, method)(problem([COMM.rank] if mpi else None), nodes=COMM.size,
                               comm=COMM if mpi else None, **settings)


def adadelta_teleportation(mpi):
    return run(mpi, "teleportation", k=2, rounds=8, optimizer=torch.optim.Adadelta,
               log_every=4)


def rmsprop_dsgd(mpi):
    opt = torch.optim.RMSprop(bn_net().parameters(), lr=0.01, momentum=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    return run(mpi, "dsgd", rounds=8, optimizer=opt, lr=sched, log_every=4)


def lion_teleportation(mpi):
    return run(mpi, "teleportation", k=3, rounds=8, log_every=4,
               optimizer=functools.partial(Lion, lr=0.01, weight_decay=0.1))


def adadelta_resumed(mpi):
    settings = dict(k=2, optimizer=torch.optim.Adadelta, log_every=4)
    if not mpi:
        return run(False, "teleportation", rounds=14, **settings)
    out = Path(COMM.bcast(tempfile.mkdtemp(prefix="optimizer-resume-") if COMM.rank == 0
                          else None)) / "resume"
    run(True, "teleportation", rounds=8, out=out, checkpoint_every=5, **settings)
    return run(True, "teleportation", rounds=14, out=out, resume=out, **settings)


def adadelta_latency(variant):  # (two state vectors a token: the clock's state message)
    return lambda mpi: run(mpi, "teleportation", k=2, rounds=8, optimizer=torch.optim.Adadelta,
                           log_every=4, variant=variant, latency="const:5,bw:1",
                           clock="virtual", compute_time=10)


def by_name(flags, **keywords):
    """The command line's flags through a script (RunSettings.from_args, comm="auto": MPI
    under mpirun) on the ranks; the keyword API's run on the simulator (issue 57)."""
    def case(mpi):
        if not mpi:
            return run(False, "teleportation", k=2, rounds=8, log_every=4, **keywords)
        mine = problem([COMM.rank])
        settings = mt.RunSettings.from_args(
            ["--k", "2", "--algorithm", "teleportation", "--rounds", "8", "--log-every", "4",
             "--progress", "off", *flags], problem=mine, comm="auto")
        return mt.train(mine, settings, "auto")
    return case


STEP_LR = functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.7)
CASES = {"adadelta-teleportation": adadelta_teleportation, "rmsprop-dsgd": rmsprop_dsgd,
         "lion-teleportation": lion_teleportation, "adadelta-resumed": adadelta_resumed,
         "adadelta-latency-overlap": adadelta_latency("overlap"),
         "adadelta-latency-simple": adadelta_latency("simple"),
         "adadelta-steplr-by-name": by_name(
             ["--lr", "1.0", "--optimizer", "adadelta", "--optimizer-args", "rho=0.95",
              "--lr-scheduler", "StepLR", "--lr-scheduler-args", "step_size=1,gamma=0.7"],
             optimizer=functools.partial(torch.optim.Adadelta, lr=1.0, rho=0.95),
             lr=STEP_LR),
         "dotted-lion-by-name": by_name(
             ["--lr", "0.01", "--optimizer", "torch_toys.Lion", "--optimizer-args",
              "weight_decay=0.1"], optimizer=functools.partial(Lion, weight_decay=0.1),
             lr=0.01)}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", CASES)
def test_any_optimizer_under_mpi_equals_the_simulator(name):
    got, want = CASES[name](True), CASES[name](False)  # (communicate first, assert after)
    ok = without_time(got.records) == without_time(want.records) and np.array_equal(got.x, want.x)
    assert COMM.allreduce(bool(ok), op=MPI.LAND)
