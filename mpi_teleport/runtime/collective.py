"""How the processes of one API call fail together: agree where they can, abort where they
cannot, so no error on one rank leaves the others waiting.

**Agree at start.** Before the first round every process checks what it was given (the
Problem contract at the initial model, :mod:`mpi_teleport.core.contract`; the settings; the
communicator's size; :func:`check_start`) and the processes exchange one small record
(:func:`agree_on_start`, one allgather): each one's error, and a fingerprint of its
problem (dim, dtype, a hash of ``initial()``) and settings. Any error, or any process whose fingerprint differs from rank
0's, becomes the same one-line :class:`UsageError` on every process, naming the ranks:
the user can catch it on every rank alike, and nothing has started.

**Abort once running.** After the start an exception on one rank (a user's ``gradient``
that raises, a contract violation found on a rank's first step, a full disk) happens
while the other ranks wait for that rank's vectors inside a round: they cannot learn of
it at any later collective, and without fault-tolerant MPI there is no way to interrupt
a blocked receive. :func:`guard` therefore prints the failing rank's message once
(``[rank r] ...``: one line for mpi_teleport's own errors, the traceback for anything
else) and calls ``MPI_Abort`` on the run's communicator, which ends every process of the
job with a non-zero status. It does so whether or not the caller would catch the
exception (a caught exception would leave the others waiting for ever) and whether the
script was started as ``python script.py`` or ``python -m mpi4py script.py``. Errors that
every process raises together at the same point (the start agreement, a refused
directory, a non-finite metric shared by rank 0, a signal's agreed stop) are *agreed*
(:func:`agreed`): they pass through on every rank, catchable.

**Communicators.** :func:`check_communicator` refuses, in one line, what ``comm=`` cannot
be (an intercommunicator, a freed or null communicator, anything that is not an mpi4py
communicator) before any MPI call could hang on it. :func:`warn_if_in_mpi_job` warns when
the simulator (``comm=None``) runs inside an MPI job of several processes, each of which
then runs every node itself. This module never imports mpi4py: communicators are used
through their methods, the job is recognised by the launcher's environment variables.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import traceback
import warnings

from dataclasses import replace
from typing import TypeVar

from ..core import contract
from ..errors import DatasetMissingError, NonFiniteError, Terminated, TooFewSurvivors, UsageError

__all__ = ["agreed", "is_agreed", "guard", "check_communicator", "mpi_job_size",
           "warn_if_in_mpi_job", "check_start", "agree_on_start", "agree_on_settings",
           "MpiJobWarning"]

# Raised only after the processes agreed on them (NonFiniteError: rank 0's verdict, shared;
# Terminated: the agreed round of a signal's stop; TooFewSurvivors: the survivors' recovery
# of one round). A UsageError may be one process's own: its declared field says.
_ALWAYS_AGREED = (NonFiniteError, Terminated, TooFewSurvivors)
_ONE_LINE = (UsageError, NonFiniteError, DatasetMissingError)
_Agreed = TypeVar("_Agreed", UsageError, NonFiniteError, TooFewSurvivors)


def agreed(exc: _Agreed) -> _Agreed:
    """``exc``, raised by every process together (it passes :func:`guard`): a UsageError's
    declared ``agreed`` field is set; the others always are."""
    if isinstance(exc, UsageError):
        exc.agreed = True
    return exc


def is_agreed(exc: BaseException) -> bool:
    return isinstance(exc, _ALWAYS_AGREED) or (isinstance(exc, UsageError) and exc.agreed)


@contextlib.contextmanager
def guard(transport):
    """Around a run over ``transport``: an exception on this process that the others do
    not raise with it ends the whole job (message once, then MPI_Abort). Nothing for one
    process (``transport`` None or of size 1)."""
    try:
        yield
    except BaseException as exc:
        if transport is None or transport.size == 1 or is_agreed(exc):
            raise
        abort(transport, exc)
        raise  # (not reached: the abort ends this process)


def abort(transport, exc: BaseException) -> None:
    """Print this rank's failure once and abort the job of ``transport``'s communicator."""
    rank = transport.rank
    if isinstance(exc, _ONE_LINE):
        text = f"[rank {rank}] mpi_teleport: error: {exc}\n"
    else:
        text = f"[rank {rank}] " + "".join(traceback.format_exception(exc))
    text += (f"[rank {rank}] mpi_teleport: ending the MPI job (MPI_Abort): the other ranks "
             f"cannot learn of this failure while they wait for this rank\n")
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    transport.abort(1)


# ----------------------------------------------------------------------------- comm=
def check_communicator(comm) -> None:
    """Refuse (UsageError) a ``comm=`` no run can use, without an MPI call that could hang."""
    kind = type(comm).__name__
    if not all(callable(getattr(comm, m, None)) for m in ("Dup", "Get_size", "Is_inter")):
        raise UsageError(f"comm: expected an mpi4py communicator (an intracommunicator such "
                         f"as MPI.COMM_WORLD) or None for the simulator, got {kind} "
                         f"{comm!r:.60}")
    if not comm:  # mpi4py: a null handle (MPI.COMM_NULL, or a communicator after Free())
        raise UsageError("comm: a freed or null communicator (MPI.COMM_NULL): pass a live "
                         "one, e.g. MPI.COMM_WORLD")
    try:
        inter = comm.Is_inter()
    except Exception as exc:  # noqa: BLE001  (an MPI error: not a usable communicator)
        raise UsageError(f"comm: cannot be used ({type(exc).__name__}: {exc}): pass a live "
                         f"intracommunicator, e.g. MPI.COMM_WORLD") from None
    if inter:
        raise UsageError("comm: an intercommunicator (two groups): pass an "
                         "intracommunicator, e.g. MPI.COMM_WORLD or intercomm.Merge()")


# Launchers announce the job's size to each process (Open MPI's mpirun; PMI-1/2 launchers
# such as MPICH's Hydra or srun --mpi=pmi2); a PMIx launch exports the rank (PMIX_RANK).
_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


class MpiJobWarning(RuntimeWarning):
    """The simulator runs in every process of an MPI job (``comm=None`` under mpirun)."""


def mpi_job_size(environ=None) -> int:
    """The number of processes of the MPI job this process belongs to, as its launcher
    says in the environment; 1 outside one."""
    env = os.environ if environ is None else environ
    for name in _SIZE_VARIABLES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 1:
            return int(value)
    if env.get("PMIX_RANK", "").isdigit() and int(env["PMIX_RANK"]) > 0:
        return int(env["PMIX_RANK"]) + 1  # (at least: a rank other than 0 exists)
    return 1


def warn_if_in_mpi_job(what: str = "comm=None") -> bool:
    """Warn (once per place) when the simulator runs inside an MPI job of several
    processes; returns whether it warned."""
    size = mpi_job_size()
    if size <= 1:
        return False
    # stacklevel 5: the line of the user's script that called mt.teleportation & co.
    warnings.warn(f"{what} runs the simulator (all n nodes in this process), but this "
                  f"process is one of {size} of an MPI job: every process runs the whole "
                  f"simulation. Pass comm=MPI.COMM_WORLD (from mpi4py import MPI) to run one "
                  f"node per rank, or start a single process", MpiJobWarning, stacklevel=5)
    return True


# ----------------------------------------------------------------------------- start
def check_start(problem, spec, logging, latency, plan, transport):
    """The checks before the first round, agreed by every process (one allgather under
    MPI): the Problem contract at the initial model (:mod:`mpi_teleport.core.contract`), the
    step sizes of the first rounds, the communicator's size, and the same problem on
    every rank (:func:`agree_on_start`; the settings were agreed first,
    :func:`agree_on_settings`). Returns the spec with a
    step-size function checked every round."""
    error, failure, fingerprint, x0 = None, None, None, None
    try:
        if transport is not None and spec.nodes != transport.size:
            raise UsageError(f"nodes={spec.nodes} but the communicator has {transport.size} "
                             f"ranks: one rank per node")
        contract.first_rounds_lr(spec.lr, spec.total_rounds)
        contract.first_rounds_topology(spec)
        if spec.algorithm == "search":
            contract.can_validate(problem)
        x0 = contract.initial_model(problem)
        if transport is not None:
            first = [transport.rank]  # this rank's node: every node's data is checked
        else:  # the first round's holders (a few: a gradient of every node may be costly)
            first = spec.phases()[0].roster(0)[0][:PROBED_ROWS]
        try:
            contract.probe(problem, first, x0)
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001  (the user's gradient failed: say where)
            if transport is None:
                raise
            raise UsageError(f"{problem.name}.gradient() of node "
                             f"{first[0]} raised {type(exc).__name__}: {exc} (at the "
                             f"initial model, round 0)") from exc
    except Exception as exc:  # noqa: BLE001  (under MPI: every rank must learn of it)
        if transport is None:
            raise
        failure = exc
        error = str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
    if transport is not None:
        fingerprint = problem_fingerprint(problem, x0)
    try:
        agree_on_start(transport, error, fingerprint)
    except UsageError as refusal:
        raise refusal from failure  # (this rank's own exception, where it failed)
    return replace(spec, lr=contract.checked_lr(spec.lr))


# Rows of the simulator's gradient probe at start (under MPI each rank probes its node).
PROBED_ROWS = 8


def problem_fingerprint(problem, x0) -> dict:
    """What every process must share of its problem: dim, dtype, a hash of initial() (the
    settings are agreed before, :func:`agree_on_settings`)."""
    return {"dim": int(problem.dim), "dtype": str(problem.dtype),
            "initial": hashlib.blake2b(x0.tobytes(), digest_size=16).hexdigest()
            if x0 is not None else None}


# (what must be equal, what to do when it is not)
_SAME = {
    "dim": ("the problem's dim", "build the same problem on every rank"),
    "dtype": ("the problem's dtype", "build the same problem on every rank"),
    "initial": ("initial() (the initial model)", "build the problem from the same seed on "
                "every rank, e.g. torch.manual_seed(0) before creating the model"),
}
_SETTINGS = ("the run's settings", "call the API with the same arguments on every rank")


def agree_on_settings(transport, error: str | None, settings: dict | None) -> None:
    """The first collective of a run under MPI (one allgather over ``transport``, an
    object with ``allgather``: the run's Transport or the caller's communicator): each
    process's refusal of what it was handed, and the settings every rank must hold alike
    (the rows of the front end's settings table marked ``agree``).
    Any refusal, or a process holding other settings than rank 0, becomes the same
    agreed UsageError on every process, naming the settings, before any collective whose
    use depends on a setting (a duplicate for elastic mode, the host's split for
    threads="auto", the latency layer's placement) runs."""
    everyone = transport.allgather((error, settings))
    refused = first_error([e for e, _ in everyone])
    if refused:
        raise agreed(UsageError(refused))
    ref = everyone[0][1]
    differ = [r for r, (_, mine) in enumerate(everyone) if mine != ref]
    if not differ:
        return
    what, todo = _SETTINGS
    other = everyone[differ[0]][1]
    who = f"rank {differ[0]}" if len(differ) == 1 else f"ranks {ranks_text(differ)}"
    names = sorted(n for n in set(ref) | set(other) if ref.get(n) != other.get(n))
    detail = "; ".join(f"{n} = {other.get(n)!r} on rank {differ[0]}, {ref.get(n)!r} on rank 0"
                       for n in names[:3])
    raise agreed(UsageError(f"{what} differs between ranks: {who} "
                            f"{'differs' if len(differ) == 1 else 'differ'} from rank 0 "
                            f"({detail}); {todo}"))


def agree_on_start(transport, error: str | None, fingerprint: dict | None) -> None:
    """One allgather; raises the agreed UsageError on every process when any process
    failed its checks or holds another problem or settings than rank 0. Nothing for the
    simulator (``transport`` None): it raises its own error."""
    if transport is None:
        if error:
            raise UsageError(error)
        return
    everyone = transport.allgather((error, fingerprint))
    refused = first_error([e for e, _ in everyone])
    if refused:
        raise agreed(UsageError(refused))
    ref = everyone[0][1]
    for key, (what, todo) in _SAME.items():
        differ = [r for r, (_, fp) in enumerate(everyone) if fp[key] != ref[key]]
        if not differ:
            continue
        who = f"rank {differ[0]}" if len(differ) == 1 else f"ranks {ranks_text(differ)}"
        other = everyone[differ[0]][1][key]
        if key == "initial":
            detail = ""
        else:
            detail = f" ({other} on rank {differ[0]}, {ref[key]} on rank 0)"
        raise agreed(UsageError(f"{what} differs between ranks: {who} "
                                f"{'differs' if len(differ) == 1 else 'differ'} from rank 0"
                                f"{detail}; {todo}"))


def first_error(errors: list) -> str | None:
    """The first rank's message, naming the ranks that met it unless all did."""
    failed = [r for r, e in enumerate(errors) if e]
    if not failed:
        return None
    first = errors[failed[0]]
    if len(failed) == len(errors):
        return first
    return f"{first} (on rank{'s' if len(failed) > 1 else ''} {ranks_text(failed)} only)"


def ranks_text(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
