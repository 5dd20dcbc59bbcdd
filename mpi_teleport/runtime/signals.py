"""How a job starts and stops together: the start-up agreement, and stopping on a signal.

**Start-up.** Every rank parses and validates its own command line and config file, then
all ranks exchange one small record (:func:`mpi_teleport.front.cli.agree_on_config`, one allgather, the first
communication of a run): their error if any, and a fingerprint of the resolved
configuration and of the schedule (holders of the first rounds, a few keyed random
numbers, the package version). If any rank failed, or any rank differs from rank 0, rank
0 prints one line naming the cause and every rank exits with status 2, so a bad flag
on one rank, a config file edited between ranks' start-ups, or mixed package versions
can never run silently wrong or hang.

**Stopping on a signal.** SIGTERM (the scheduler's time limit, preemption, ``scancel``)
and SIGUSR1 (``#SBATCH --signal=B:USR1@60`` forwarded by the job scripts, or ``kill
-USR1``) only set a flag (:class:`Terminator`; idempotent, so the double SIGTERM of
``srun`` is harmless; once the ranks have agreed to stop, further signals are absorbed
until the process exits, see :meth:`Terminator.commit`; during the set-up, building the
problem is cut short at once, see :func:`interruptible`). The ranks agree on the flag by an Allreduce(MAX) of one integer at
each logging round and each checkpoint round, where a collective happens anyway, and in
between through the non-blocking reduction of :mod:`~mpi_teleport.runtime.stop_watch`;
then every rank stops at the same round, within about a second of the signal whatever
``--log-every`` is, the run writes a final checkpoint (if it has a checkpoint
directory), rank 0 prints one line, and the job exits with status 75
(:data:`EXIT_CHECKPOINTED`, EX_TEMPFAIL: "stopped early, resume me"; the ranks leave in
order, :mod:`~mpi_teleport.runtime.leaving`).

**Under the launcher** (``python -m mpi_teleport.launch``) the user's SIGTERM, SIGINT or
SIGHUP reaches the ranks as SIGUSR1, the one signal every MPI's launcher passes on; the
handler reads the signal's name the launcher left (:func:`sent_to_launcher`), so the stop
is the one the user asked for (a SIGINT is a Ctrl-C) and its line names it. Each process
tells the launcher when its handlers are in place, and when it has agreed to stop.

**Ctrl-C** (SIGINT) is caught the same way: the run stops at the agreed round, writes its
final checkpoint, prints one line, exit status 75 (130 with nowhere to write). A *second*
Ctrl-C before that agreed round stops the process at once: one line, then it dies of SIGINT (status 130 in the
shell), without a final checkpoint and without a traceback. On a terminal the first one
also says so, since the final checkpoint may take a while to write.

**The Python API** (:func:`during_call`): ``mt.teleportation``, ``mt.dsgd``,
``mt.search_k`` and ``mt.train`` install the same handlers for the call's duration only,
and only for the signals whose handlers the script left as Python set them (SIGINT:
``KeyboardInterrupt``; SIGTERM, SIGUSR1: the default), in the main thread. A signal
then stops the run at the agreed round after the final checkpoint (where the call has
``out=`` or ``checkpoint_dir=``), the handlers are put back, and the call raises in the
script, so its ``try``/``finally`` runs: ``KeyboardInterrupt`` for SIGINT (its message
says where the checkpoint is; uncaught, the script ends as after any Ctrl-C, status
130), :class:`Stopped` (a ``SystemExit``: uncaught, the script ends with status 75
after a checkpoint, else 128 + the signal, without a traceback) for SIGTERM and SIGUSR1.
A second Ctrl-C before the agreed round raises ``KeyboardInterrupt`` at once, without a
final checkpoint. After a stop by SIGTERM or SIGUSR1 later ones are ignored (the
scheduler's duplicate SIGTERM cannot turn status 75 into 143).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

EXIT_CHECKPOINTED = 75  # stopped by a signal after a final checkpoint: requeue and --resume
EXIT_USAGE = 2
SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


from ..errors import Terminated  # noqa: E402,F401  (raised at the agreed round)


_installed: list = []  # the Terminators whose handlers are in place, innermost last

# Under ``python -m mpi_teleport.launch`` (launch.py): a folder the launcher and the
# ranks on its host share. A rank's file ``ready-PID`` says its handlers are in place (a
# signal passed on now stops it at an agreed round; without them SIGUSR1 would kill it);
# the file ``signal`` names the signal the user sent the launcher, which reaches the ranks
# as SIGUSR1 (the one signal every MPI's launcher passes on to every rank once).
LAUNCH_DIR = "MPI_TELEPORT_LAUNCH_DIR"


def _launch_note(name: str) -> Path | None:
    folder = os.environ.get(LAUNCH_DIR)
    return Path(folder) / name if folder else None


def _mark_ready(ready: bool) -> None:
    """This process's ``ready-PID`` file in the launcher's folder (nothing elsewhere, or
    on another host, where the folder is absent)."""
    _mark("ready", ready)


def _mark(what: str, present: bool = True) -> None:
    """This process's file ``WHAT-PID`` in the launcher's folder: ``ready`` (its handlers
    are in place), ``committed`` (the processes agreed to stop: the final checkpoint and
    the exit follow, which a second signal does not cut short)."""
    path = _launch_note(f"{what}-{os.getpid()}")
    if path is None:
        return
    try:
        if present:
            path.touch()
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def sent_to_launcher(signum: int) -> int:
    """The signal the user sent the launcher, where ``signum`` is the SIGUSR1 it passed
    on (SIGINT, SIGTERM or SIGHUP); else ``signum``."""
    path = _launch_note("signal")
    if signum != signal.SIGUSR1 or path is None:
        return signum
    try:
        name = path.read_text().strip()
    except OSError:
        return signum
    return int(signal.Signals[name]) if name in signal.Signals.__members__ else signum


def pending() -> int:
    """The signal the installed :class:`Terminator` caught, or 0: set-up work that has
    nothing to checkpoint yet (a long sum over all nodes) polls it to stop at once."""
    return _installed[-1].signum if _installed else 0


class SetupInterrupted(BaseException):
    """Raised by the signal handler inside :func:`interruptible` set-up work (a user's
    problem factory, data loading): nothing has run, so nothing needs saving, and the
    process need not wait for that work to return. A BaseException, so that the user's
    ``except Exception`` cannot swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def interruptible():
    """Around set-up work that has nothing to checkpoint and may take long in code that
    cannot poll :func:`pending` (a ``--problem module:function`` factory, loading a data
    set): a signal (or one already caught) raises :class:`SetupInterrupted` at once
    instead of only setting the flag. Nothing when no :class:`Terminator` is installed."""
    term = _installed[-1] if _installed else None
    if term is None:
        yield
        return
    if term.signum:
        raise SetupInterrupted(term.signum)
    term._interruptible = True
    try:
        yield
    finally:
        term._interruptible = False


def exit_status(exc: Terminated) -> int:
    """75 when a checkpoint was written (requeue and resume), else 128 + the signal."""
    return EXIT_CHECKPOINTED if exc.checkpoint is not None else 128 + exc.signum


class Terminator:
    """Catches SIGTERM/SIGUSR1/SIGINT and remembers the first one; :meth:`agree` tells
    every rank whether any rank got one. A second SIGINT ends the process at once. Use as
    a context manager (restores the old handlers)."""

    def __init__(self, signals=SIGNALS, prog: str | None = None):
        self.signals = tuple(signals)
        self.signum = 0
        self.prog = prog or program_name()
        self._interrupts = 0
        self._old: dict = {}
        self.committed = False
        self._interruptible = False  # inside interruptible() set-up work

    def commit(self) -> None:
        """The processes agreed to stop: from now on (the final checkpoint, the one line,
        the exit with 75) further signals are absorbed, also after :meth:`restore`, so the
        second SIGTERM srun sends at a time limit, or a second Ctrl-C, cannot turn a
        completed checkpoint's status 75 into 143 or 130.

        The signals are ignored at the operating system's level (``SIG_IGN``), not by a
        Python handler: the interpreter puts its Python handlers back to the default while
        it finalises, and mpi4py's ``MPI_Finalize`` runs after that (``Py_AtExit``), so a
        signal landing there killed the process (143; under mpirun the launcher then
        reported it for the whole job). ``SIG_IGN`` survives the finalisation."""
        self.committed = True
        _mark("committed")  # (the launcher lets a committed stop finish)
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                signal.signal(s, signal.SIG_IGN)

    def _handle(self, signum, frame) -> None:  # between bytecodes: set a flag, little else
        if self.committed:
            return  # the stop is decided (final checkpoint, exit 75): nothing changes it
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts > 1:
                self._stop_now()
            if os.isatty(2) and not self._interruptible:  # at a terminal: why nothing happens yet
                _say(f"{self.prog}: Ctrl-C: stopping within about a second, after a final "
                     "checkpoint (Ctrl-C again: stop at once, without one)")
        if not self.signum:
            self.signum = sent_to_launcher(signum)  # (the launcher's SIGUSR1: what the user sent)
        if self._interruptible:  # set-up work with nothing to save: stop it now
            self._interruptible = False
            raise SetupInterrupted(self.signum)

    def _stop_now(self, *_) -> None:
        """One line, then die of SIGINT as an uncaught Ctrl-C would (the shell sees 130,
        and a script running us stops too), without a traceback."""
        again = "a second " if self._interrupts > 1 else ""
        _say(f"{self.prog}: stopped at once by {again}Ctrl-C (SIGINT), without a final checkpoint")
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)

    def install(self) -> "Terminator":
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._old[s] = signal.signal(s, self._handle)
            _installed.append(self)
            if len(_installed) == 1 and signal.SIGUSR1 in self.signals:
                _mark_ready(True)
        return self

    def restore(self) -> None:
        for s, old in self._old.items():
            # after a committed stop the process is on its way out with its status: a
            # late duplicate signal is absorbed until it exits
            signal.signal(s, signal.SIG_IGN if self.committed else old)
        self._old.clear()
        _uninstall(self)

    def release(self) -> None:
        """Back to the default handlers, for work that takes no checkpoints (Algorithm 2):
        a signal then ends it at once (one already caught is raised again); Ctrl-C too, in
        one line rather than Python's KeyboardInterrupt traceback."""
        handled = signal.SIGINT in self._old
        self.restore()
        if handled:  # (restored by the next restore(), at the end of the ``with`` block)
            self._old[signal.SIGINT] = signal.signal(signal.SIGINT, self._stop_now)
        if self.signum == signal.SIGINT:
            self._stop_now()
        elif self.signum:
            signal.raise_signal(self.signum)

    def __enter__(self) -> "Terminator":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()


def _uninstall(term: "Terminator") -> None:
    if term in _installed:
        _installed.remove(term)
        if not _installed:
            _mark_ready(False)


class Stopped(SystemExit):
    """SIGTERM or SIGUSR1 (a scheduler's time limit, ``scancel``) stopped an API call at an
    agreed round. A ``SystemExit``: uncaught, the script ends with ``code`` -- 75
    (:data:`EXIT_CHECKPOINTED`, "resume me") after a final checkpoint, else 128 + the
    signal -- and no traceback, its ``finally`` blocks run, and ``except Exception`` does
    not swallow it. ``round``: where it stopped; ``checkpoint``: the final checkpoint's
    directory, or None where the call had nowhere to write; ``resume``: what to pass as
    ``resume=`` to continue, or None."""

    def __init__(self, message: str, signum: int, r: int, checkpoint, resume):
        super().__init__(EXIT_CHECKPOINTED if checkpoint is not None else 128 + signum)
        self.message = message
        self.signum, self.round, self.checkpoint, self.resume = signum, r, checkpoint, resume

    def __str__(self) -> str:
        return self.message


def _python_default(signum: int) -> bool:
    """The handler is still the one Python starts with (the script installed none)."""
    handler = signal.getsignal(signum)
    if signum == signal.SIGINT:
        return handler is signal.default_int_handler
    return handler in (signal.SIG_DFL, None)


class _CallTerminator(Terminator):
    """A :class:`Terminator` for one API call: SIGINT's handler is put back after a stop
    (the script goes on), and a second Ctrl-C raises ``KeyboardInterrupt`` at once."""

    def restore(self) -> None:
        for s, old in self._old.items():
            keep_ignoring = self.committed and s != signal.SIGINT
            signal.signal(s, signal.SIG_IGN if keep_ignoring else old)
        self._old.clear()
        _uninstall(self)

    def commit(self) -> None:
        self.committed = True
        _mark("committed")
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                if s != signal.SIGINT:
                    signal.signal(s, signal.SIG_IGN)

    def _stop_now(self, *_) -> None:
        _say(f"{self.prog}: stopped at once by a second Ctrl-C (SIGINT), without a final "
             "checkpoint")
        old = self._old.get(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGINT, old)
        raise KeyboardInterrupt


@contextlib.contextmanager
def during_call(announce: bool = True):
    """Around one API call: a :class:`Terminator` for the signals the script left to
    Python (yielded; None where it handles them all itself, or off the main thread), and
    the run's :class:`Terminated` turned into ``KeyboardInterrupt`` or :class:`Stopped`
    for the script (module docstring). ``announce``: this process says the stop in one
    line on stderr (the root), as the command line does."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    mine = tuple(s for s in SIGNALS if _python_default(s))
    if not mine:
        yield None
        return
    term = _CallTerminator(mine).install()
    try:
        yield term
    except Terminated as exc:
        raised = for_script(exc)
        if announce and isinstance(raised, Stopped):  # (a KeyboardInterrupt shows its own)
            _say(f"{term.prog}: {raised}")
        raise raised from None
    finally:
        term.restore()


def for_script(exc: Terminated) -> BaseException:
    """The exception an API call raises in the script after a signal stopped it."""
    name = (signal.Signals(exc.signum).name
            if exc.signum in signal.Signals._value2member_map_ else str(exc.signum))
    checkpoint = exc.checkpoint
    resume = None if checkpoint is None else str(Path(checkpoint).parent)
    if "before round" in str(exc):  # (during the set-up: nothing ran)
        where = (f"nothing ran; continue with resume={resume!r}" if resume
                 else "nothing ran; start the run again")
        message = f"stopped by {name} before round {exc.round} (during the set-up): {where}"
    elif checkpoint is not None:
        message = (f"stopped by {name} at round {exc.round}: checkpoint written to "
                   f"{checkpoint}; continue with resume={resume!r} (or resume='auto')")
    else:
        message = (f"stopped by {name} at round {exc.round}: no checkpoint written (give out= "
                   "or checkpoint_dir= to have one)")
    if exc.signum == signal.SIGINT:  # (exactly KeyboardInterrupt: Python exits 130 on it)
        return interrupted(message, exc.round, checkpoint, resume)
    return Stopped(message, exc.signum, exc.round, checkpoint, resume)


def interrupted(message: str, r: int, checkpoint, resume) -> KeyboardInterrupt:
    """Ctrl-C (SIGINT) stopped an API call at an agreed round: a ``KeyboardInterrupt``
    (exactly that class: uncaught, Python ends the script as after any Ctrl-C, status
    130), carrying ``round``, ``checkpoint`` and ``resume`` as :class:`Stopped` does, and
    the ``status`` a job that every rank so stopped ends with (75 after a final
    checkpoint, else 130: the launcher's runner, mpi_teleport/script_runner.py)."""
    exc = KeyboardInterrupt(message)
    exc.round, exc.checkpoint, exc.resume = r, checkpoint, resume  # type: ignore[attr-defined]
    exc.status = EXIT_CHECKPOINTED if checkpoint is not None else 128 + signal.SIGINT  # type: ignore[attr-defined]
    return exc


def _say(line: str) -> None:
    """One line on stderr from a signal handler: a raw write, since the interrupted code
    may be inside a print to the same stream."""
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:
        pass


def program_name() -> str:
    """How this process was started, for messages: ``python -m mpi_teleport.sim``."""
    parts = os.path.normpath(sys.argv[0] if sys.argv and sys.argv[0] else "").split(os.sep)
    if len(parts) >= 2 and parts[-2] == "mpi_teleport" and parts[-1].endswith(".py"):
        return f"python -m mpi_teleport.{parts[-1][:-3]}"
    return "mpi_teleport"


def agree_on_error(transport, error: str | None, signum: int = 0) -> tuple[str | None, int]:
    """One allgather: (the message every rank must stop with when any rank met an error
    (data or device missing on one node only, say), else None; the first signal any rank
    stopped its set-up for, else 0). A collective."""
    everyone = transport.allgather((error, signum))
    return _first_error([e for e, _ in everyone]), max(s for _, s in everyone)


from .collective import first_error as _first_error  # noqa: E402
