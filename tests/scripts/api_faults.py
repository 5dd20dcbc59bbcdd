"""An API user's script with one fault chosen by argv[1] (tests/test_api_collective.py).

    mpirun -n N python tests/scripts/api_faults.py FAULT [catch]

FAULT: raise-late (gradient raises on rank 1 in round 3), raise-first (on rank 1 at the
initial model), unseeded (initial() differs between ranks), resume-one-rank (rank 1
alone is given a resume= path that does not exist), intercomm, comm-null,
not-a-comm, comm-none (the simulator inside the MPI job), new-array (gradient returns
a new array; prints the records' errors).
With ``catch`` the script catches the exception and goes on (then exits 0); with
``sim=N`` it runs the simulator of N nodes instead (one process, comm=None)."""
import json
import sys

import numpy as np
from mpi4py import MPI

import mpi_teleport as mt

fault = sys.argv[1]
catch = "catch" in sys.argv[2:]
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


class Mean:
    dim, dtype, metric, higher_is_better = 3, np.float64, "error", False

    def __init__(self, seed=0):
        self.x0 = np.random.default_rng(seed).normal(size=3)

    def initial(self):
        return self.x0.copy()

    def gradient(self, nodes, x, t, out=None):
        if fault == "raise-late" and rank == 1 and t >= 3:
            raise ValueError("boom in gradient on rank 1")
        if fault == "raise-first" and rank == 1:
            raise ValueError("boom at the start on rank 1")
        target = np.asarray(nodes, dtype=np.float64)[:, None]
        if fault == "new-array":
            return x - target  # a new array, out= left alone
        return np.subtract(x, target, out=out)

    def evaluate(self, x):
        return {"error": float(np.mean((x - 1.5) ** 2))}


seed = rank if fault == "unseeded" else 0
run_comm = comm
if fault == "intercomm":
    half = comm.Split(rank % 2, rank)
    run_comm = half.Create_intercomm(0, comm, 1 - rank % 2, 7)
elif fault == "comm-null":
    run_comm = comm.Dup()
    run_comm.Free()
elif fault == "not-a-comm":
    run_comm = "COMM_WORLD"
elif fault == "comm-none":  # the simulator in every process of the job
    run_comm = None
nodes = size
sim = [a for a in sys.argv[2:] if a.startswith("sim=")]
if sim:  # the simulator's records of the same run, for comparison
    nodes, run_comm = int(sim[0][4:]), None
extra = {}
if fault == "resume-one-rank" and rank == 1:  # a checkpoint only this rank cannot find
    extra["resume"] = "/nonexistent/mpi_teleport/run"
try:
    result = mt.teleportation(Mean(seed), nodes=nodes, k=2, rounds=8, lr=0.1, log_every=2,
                              comm=run_comm, **extra)
    if rank == 0:
        print(json.dumps([r["error"] for r in result.records]), flush=True)
except Exception as exc:
    if not catch:
        raise
    print(f"rank {rank} caught {type(exc).__name__}: {exc}", flush=True)
sys.exit(0)
