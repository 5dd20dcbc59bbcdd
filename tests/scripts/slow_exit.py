"""Run ``python -m MODULE ARGS`` with a slow interpreter exit (tests only): the process
lingers 2 s after main() returned, so a late signal lands while it exits, as srun's
second SIGTERM may (tests/test_signals_shutdown.py).

    python tests/scripts/slow_exit.py mpi_teleport.sim --nodes 4 ...
"""
import atexit
import runpy
import sys
import time

atexit.register(time.sleep, 2.0)  # registered first: runs last, after mpi4py's finalize
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
