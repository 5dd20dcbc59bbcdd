"""The API under mpirun, writing checkpoints or resuming them (tests only).

    mpirun -n N python tests/scripts/api_resume.py write|resume|fresh|bad DIR

``resume`` continues the run in DIR, ``fresh`` starts a new one there, ``bad`` passes a
momentum as text; each prints "rank R: <the one line>" and exits 3 on a UsageError,
"rank R: ran" otherwise, so a test sees what every rank ended with.
"""
import sys

from mpi4py import MPI

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic

comm = MPI.COMM_WORLD
mode, out = sys.argv[1], sys.argv[2]
settings = dict(nodes=comm.Get_size(), k=2, lr=0.1, log_every=2, comm=comm)
problem = Quadratic(n=comm.Get_size(), d=3, sigma2=1.0)
if mode == "write":
    mt.teleportation(problem, rounds=4, checkpoint_every=2, out=out, **settings)
    sys.exit(0)
extra = {"resume": dict(resume=out), "fresh": {}, "bad": dict(momentum="0.9")}[mode]
try:
    mt.teleportation(problem, rounds=8, out=out, **settings, **extra)
except mt.UsageError as exc:
    print(f"rank {comm.Get_rank()}: {exc}", flush=True)
    sys.exit(3)
print(f"rank {comm.Get_rank()}: ran", flush=True)
