"""An API script for tests/test_api_signals.py: ``python api_signal_script.py OUT SIGNAL
[own]`` trains with ``resume="auto"`` in OUT and sends itself SIGNAL (SIGINT, SIGTERM or
none; outside: sent by the test) when the record of round 20 is written (``slow``: half a
second per record); ``own``: the script installs its own
SIGTERM handler first (the call then leaves SIGTERM to it); ``late``: it waits 60 s
before the call (touching OUT.waiting), as a script importing a large library. Prints ``finally ran`` from
its ``finally`` block and ``x <values>`` when the call returns. Under MPI (``mpi`` in
argv) one node per rank."""
import os
import signal
import sys

import numpy as np

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic

out, name = sys.argv[1], sys.argv[2]
comm = None
if "mpi" in sys.argv:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
root = comm is None or comm.rank == 0
caught = []
if "own" in sys.argv:
    signal.signal(signal.SIGTERM, lambda s, f: caught.append(s))
mark = out + ".sent"
if "late" in sys.argv:  # (no handler of ours yet: a signal now finds nothing to stop)
    import time

    open(out + ".waiting", "w").close()
    time.sleep(60)


def callback(record):  # (on the root) the signal, once, at round 20
    if "slow" in sys.argv:  # (time for a signal from outside to land mid-run)
        import time

        time.sleep(1.0)
    if name not in ("none", "outside") and record["round"] == 20 and not os.path.exists(mark):
        open(mark, "w").close()
        os.kill(os.getppid() if "parent" in sys.argv else os.getpid(), getattr(signal, name))


try:
    result = mt.teleportation(Quadratic(n=4, d=3, seed=0), nodes=4, k=2, rounds=60, lr=0.05,
                              log_every=10, out=out, checkpoint_every=25, callback=callback,
                              resume="auto", comm=comm)
    if root:
        print("x", " ".join(repr(float(v)) for v in result.x), flush=True)
        print("records", len(result.records), flush=True)
    if caught:
        print("own handler", caught[0], flush=True)
finally:
    if root:
        print("finally ran", flush=True)
