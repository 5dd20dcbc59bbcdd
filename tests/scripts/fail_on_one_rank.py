"""Run mpi_teleport.run with an exception injected on rank 2 in round 5 (tests only)."""
import sys

from mpi4py import MPI

import mpi_teleport.runtime.backends.compiled as fast  # where the compiled rounds look local_step up
import mpi_teleport.runtime.backends.mpi as tele  # where the round executor's step looks it up
from mpi_teleport import run

if MPI.COMM_WORLD.Get_rank() == 2:
    real_step = tele.local_step

    def failing_step(problem, nodes, x, v, t, *args, **kw):
        if t >= 5:
            raise RuntimeError("injected failure on rank 2")
        return real_step(problem, nodes, x, v, t, *args, **kw)

    fast.local_step = tele.local_step = failing_step

sys.exit(run.main(sys.argv[1:]))
