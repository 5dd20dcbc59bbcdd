"""Run mpi_teleport.run with one node's local step of one round delayed (tests only):
LATE_NODE's step of round LATE_ROUND sleeps LATE_S seconds first. Sleeping changes no
number of the run; it makes that node finish the round late while the others may be
done (tests/test_mpi.py: time_s counts until every rank has finished a logged round)."""
import os
import sys
import time

import mpi_teleport.runtime.backends.compiled as fast  # where the compiled rounds look local_step up
import mpi_teleport.runtime.backends.mpi as tele  # where the round executor's step looks it up
from mpi_teleport import run

node, round_, delay = int(os.environ["LATE_NODE"]), int(os.environ["LATE_ROUND"]), float(os.environ["LATE_S"])
real_step = tele.local_step


def late_step(problem, nodes, x, v, t, *args, **kw):
    if t == round_ and node in list(nodes):
        time.sleep(delay)
    return real_step(problem, nodes, x, v, t, *args, **kw)


fast.local_step = tele.local_step = late_step
sys.exit(run.main(sys.argv[1:]))
