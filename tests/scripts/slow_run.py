"""Run mpi_teleport.run with every local step slowed down by SLOW_STEP_S seconds of sleep
(tests only): a run that meets its SLURM time limit without using the CPU. Under SLURM
only the first attempt is slowed (SLURM_RESTART_COUNT unset or 0), so a requeued attempt
finishes quickly. Sleeping changes no number of the run.

While slowed, a rank waiting for its peers' messages sleeps too (it tests its requests
every few milliseconds instead of MPI's busy Waitall): with k < n most ranks wait most of
the time, and four ranks spinning through a two-minute job would take the CPU the rest of
the test suite runs on. Testing until complete is Waitall's answer, so no number changes."""
import os
import sys
import time

import mpi_teleport.runtime.backends.compiled as fast  # where the compiled rounds look local_step up
import mpi_teleport.runtime.backends.mpi as tele  # where the round executor's step looks it up
from mpi4py import MPI

from mpi_teleport import run
from mpi_teleport.runtime.transport import Transport

delay = float(os.environ.get("SLOW_STEP_S", "0.005"))
if os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
    delay = 0.0
real_step = tele.local_step


def slow_step(*args, **kw):
    if delay:
        time.sleep(delay)
    return real_step(*args, **kw)


def polite_waitall(requests):
    while not MPI.Request.Testall(requests):
        time.sleep(0.002)


def polite_wait(self, pending, _wait=Transport.wait):
    if pending.requests:
        polite_waitall(pending.requests)
        pending.requests.clear()
    _wait(self, pending)  # (its own checks)


def polite_init(self, *args, _init=Transport.__init__, **kw):
    _init(self, *args, **kw)
    self.wait_all = polite_waitall  # (the persistent channels' completion)


if delay:
    fast.local_step = tele.local_step = slow_step
    Transport.wait, Transport.__init__ = polite_wait, polite_init
sys.exit(run.main(sys.argv[1:]))
