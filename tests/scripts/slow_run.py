"""Run mpi_teleport.run with every local step slowed down by SLOW_STEP_S seconds of sleep
(tests only): a run that meets its SLURM time limit without using the CPU. Under SLURM
only the first attempt is slowed (SLURM_RESTART_COUNT unset or 0), so a requeued attempt
finishes quickly. Sleeping changes no number of the run."""
import os
import sys
import time

import mpi_teleport.runtime.backends.compiled as fast  # where the compiled rounds look local_step up
import mpi_teleport.runtime.backends.mpi as tele  # where the round executor's step looks it up
from mpi_teleport import run

delay = float(os.environ.get("SLOW_STEP_S", "0.005"))
if os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
    delay = 0.0
real_step = tele.local_step


def slow_step(*args, **kw):
    if delay:
        time.sleep(delay)
    return real_step(*args, **kw)


fast.local_step = tele.local_step = slow_step
sys.exit(run.main(sys.argv[1:]))
