"""A user's own script, as a new user writes one (run by tests/test_launch.py through
``python -m mpi_teleport.launch -n 4 tests/scripts/user_script.py --rounds R``): its own
arguments, the API with ``comm``, and the simulator's records compared on rank 0."""
import argparse
import json
import sys

import numpy as np
from mpi4py import MPI

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=10)
args = parser.parse_args()

comm = MPI.COMM_WORLD
settings = dict(nodes=comm.size, k=2, rounds=args.rounds, lr=0.05, momentum=0.5, log_every=5)
got = mt.teleportation(Quadratic(n=comm.size, d=4, seed=1), comm=comm, **settings)
want = mt.teleportation(Quadratic(n=comm.size, d=4, seed=1), **settings)
same = [{k: v for k, v in r.items() if k != "time_s"} for r in got.records] == \
    [{k: v for k, v in r.items() if k != "time_s"} for r in want.records]
same = comm.allreduce(bool(same and np.array_equal(got.x, want.x)), op=MPI.LAND)
if comm.rank == 0:
    json.dump({"ranks": comm.size, "rounds": args.rounds, "argv": sys.argv[1:],
               "records": len(got.records), "same_as_simulator": same}, sys.stdout)
