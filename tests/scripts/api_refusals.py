"""An API user's script whose first call is refused mid-run by a pure function of shared
state, then makes a second call on the same communicator (tests/test_api_collective.py).

    mpirun -n N python tests/scripts/api_refusals.py FAULT

FAULT: topology-late (a topology function invalid in rounds 5-7),
topology-start (one that returns strings), lr-late (a step-size function that turns
negative at rounds 5-7), search-topology-late (the topology in Algorithm 2's phase 2,
rounds 17-19). Every
rank prints ``rank R refused: <message>`` and then ``rank R second call: k=K``; with
``sim=N`` the simulator of N nodes runs (comm=None) instead, for comparison (issue 31,
classes 4 and 5)."""
import sys

import numpy as np
from mpi4py import MPI

import mpi_teleport as mt

fault = sys.argv[1]
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
sim = [int(a[4:]) for a in sys.argv[2:] if a.startswith("sim=")]
run_comm, nodes = (None, sim[0]) if sim else (comm, size)


class Mean:
    dim, dtype, metric, higher_is_better = 3, np.float64, "error", False

    def initial(self):
        return np.zeros(3)

    def gradient(self, nodes, x, t, out=None):
        return np.subtract(x, np.asarray(nodes, dtype=np.float64)[:, None], out=out)

    def evaluate(self, x):
        return {"error": float(np.mean((x - 1.5) ** 2))}


def late_ring(k, t):
    """Uniform weights, but rows summing to 2 in rounds 5-7: past the start's check of
    rounds 0, 1, 2 and the last."""
    return np.full((k, k), 2.0 / k if 5 <= t < 8 else 1.0 / k)


def words(k, t):
    return [["w"] * k] * k


args = dict(nodes=nodes, rounds=12, lr=0.1, log_every=4, comm=run_comm)
try:
    if fault == "topology-late":
        mt.teleportation(Mean(), k=2, topology=late_ring, **args)
    elif fault == "topology-start":
        mt.teleportation(Mean(), k=2, topology=words, **args)
    elif fault == "lr-late":
        mt.teleportation(Mean(), k=2, **{**args, "lr": lambda t: -0.1 if 5 <= t < 8 else 0.1})
    elif fault == "search-topology-late":
        mt.search_k(Mean(), topology=lambda k, t: late_ring(k, t - 12), **args)
    print(f"rank {rank} ran", flush=True)
except mt.UsageError as exc:
    print(f"rank {rank} refused: {exc}", flush=True)
result = mt.teleportation(Mean(), k=2, **args)
print(f"rank {rank} second call: k={result.k}", flush=True)
