"""A user's script whose rank 1 raises before its first call into mpi_teleport (issue 50,
class 8): the other ranks are already in the run's start-up collective. Started by
``python -m mpi_teleport.launch`` (under mpi4py's runner) the whole job must end, with the
traceback once (tests/test_launch.py)."""
from mpi4py import MPI

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import quadratic

comm = MPI.COMM_WORLD
if comm.Get_rank() == 1:
    raise RuntimeError("rank 1 fails before its first call")
mt.teleportation(quadratic(comm.Get_size(), dim=4), nodes=comm.Get_size(), k=2, rounds=5, lr=0.1,
                 comm=comm)
