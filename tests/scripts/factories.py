"""``--problem factories:NAME`` problem factories for tests (tests/scripts on PYTHONPATH):
``slow`` takes 4 s to build the quadratic problem, ``exits`` calls sys.exit(0)."""
import sys
import time

from mpi_teleport.problems.quadratic import quadratic


def slow(nodes, seed):
    time.sleep(4.0)
    return quadratic(nodes, seed=seed)


def exits(nodes, seed):
    sys.exit(0)
