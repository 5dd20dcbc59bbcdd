"""Run mpi_teleport.run with one rank out of step with the others (tests only).

    perturb_one_rank.py RANK MODE [run flags]

MODE ``config``: that rank alone gets ``--lr 0.002`` appended (as if its config file had
been edited); ``schedule``: that rank alone computes a different schedule (as if it ran
another numpy/mpi_teleport version); ``badflag``: that rank alone gets ``--k 0``.
"""
import sys

from mpi4py import MPI

from mpi_teleport import run, schedule

victim, mode, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if MPI.COMM_WORLD.Get_rank() == victim:
    if mode == "config":
        argv = [*argv, "--lr", "0.002"]
    elif mode == "badflag":
        argv = [*argv, "--k", "0"]
    elif mode == "schedule":
        real = schedule.holders_block  # holders(...) is its first row

        def shifted(seed, n, k, t0, count):
            return (real(seed, n, k, t0, count) + 1) % n

        schedule.holders_block = shifted
    else:
        raise SystemExit(f"unknown mode {mode!r}")

sys.exit(run.main(argv))
