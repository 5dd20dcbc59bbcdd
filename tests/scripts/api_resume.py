"""The API under mpirun, writing checkpoints or resuming them (tests only).

    mpirun -n N python tests/scripts/api_resume.py write|resume|fresh|bad|places DIR

``resume`` continues the run in DIR, ``fresh`` starts a new one there, ``bad`` passes a
momentum as text; each prints "rank R: <the one line>" and exits 3 on a UsageError,
"rank R: ran" otherwise, so a test sees what every rank ended with. ``places`` runs and
resumes one run whose out and checkpoint_dir are one directory (DIR/both) and one that
keeps them apart (DIR/files, DIR/ck, resumed without checkpoint_dir).
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
if mode == "places":  # issue 31, classes 6 and 7: one directory for both; kept apart
    both, files, ck = f"{out}/both", f"{out}/files", f"{out}/ck"
    mt.teleportation(problem, rounds=4, checkpoint_every=2, out=both, checkpoint_dir=both,
                     **settings)
    mt.teleportation(problem, rounds=8, checkpoint_every=2, out=both, checkpoint_dir=both,
                     resume=both, **settings)
    mt.teleportation(problem, rounds=4, checkpoint_every=2, out=files, checkpoint_dir=ck,
                     **settings)
    mt.teleportation(problem, rounds=8, checkpoint_every=2, out=files, resume=ck, **settings)
    print(f"rank {comm.Get_rank()}: ran", flush=True)
    sys.exit(0)
extra = {"resume": dict(resume=out), "fresh": {}, "bad": dict(momentum="0.9")}[mode]
try:
    mt.teleportation(problem, rounds=8, out=out, **settings, **extra)
except mt.UsageError as exc:
    print(f"rank {comm.Get_rank()}: {exc}", flush=True)
    sys.exit(3)
print(f"rank {comm.Get_rank()}: ran", flush=True)
