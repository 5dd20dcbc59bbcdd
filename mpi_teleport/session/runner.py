"""One run of a spec on the back end asked for: the simulator, or one node per MPI rank.

Shared by the Python API (:mod:`mpi_teleport.api`) and the command lines (both make the
RunSettings of a run by :func:`mpi_teleport.session.prepare.prepare`): it checks what it is handed by the settings
table's rules and, under MPI, has every rank agree on it first; it holds the output
directories (one lock path for both), builds the back end (with the latency layer where
asked), and hands the run to the engine (:func:`mpi_teleport.runtime.engine.execute`).
:class:`RunSettings` holds values only; what the caller holds while the run runs is its
:class:`RunContext`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime import collective, engine
from ..checkpoint import CheckpointPlan
from ..elastic.meeting import Meeting, survivors_meet
from ..elastic.transport import refuse_without_ulfm
from ..errors import Terminated, TooFewSurvivors, UsageError
from ..disk.output import RunFiles
from ..problem import with_defaults
from ..runtime.progress import Progress
from .prepare import RunSettings
from .settings import ABSENT, check_run, check_together, held, rows
from ..core.spec import Logging, RunSpec
from ..latency.model import LatencySettings


@dataclass
class RunContext:
    """What the caller of :func:`train` holds for one run beside its settings: live
    handles, never settings. ``terminator``: the command line's signal handler (SIGTERM,
    SIGUSR1: a checkpoint, then exit 75); ``pool``: the job's hot spares; ``progress``:
    a progress bar already made (else ``settings.progress`` makes one); ``files``: the
    run's output files when the caller keeps them (their records in memory; else
    ``settings.out`` makes them); ``meeting``:
    where an elastic run that ends in an exception hands over the survivors'
    communicator, so that they meet once the command line has said why (a
    :class:`Meeting`); ``joining``: a
    hot spare that took a node over, ``(round, reformed)`` (what ``pool.reform``
    returned): the rest of the run as that node."""

    terminator: Any = None
    pool: Any = None
    progress: Progress | None = None
    files: RunFiles | None = None
    meeting: Meeting | None = None
    joining: tuple | None = None


def train(problem: Any, settings: RunSettings, comm: Any = None,
          context: RunContext | None = None) -> engine.Result:
    """The one run function: ``problem`` trained as a :class:`RunSettings` says.

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> problem = Quadratic(n=8, d=3)
    >>> settings = mt.RunSettings.from_args(["--nodes", "8", "--k", "2", "--rounds", "20",
    ...     "--algorithm", "teleportation", "--progress", "off"], problem=problem)
    >>> mt.train(problem, settings).summary["rounds_run"]
    20

    It runs on the back end ``comm`` asks for. ``comm`` None: the simulator, every node in this process; an mpi4py
    communicator: one node per rank, on a duplicate the run frees (an exception on one
    rank during the rounds ends the job); the command line's own
    :class:`~mpi_teleport.runtime.transport.Transport`: used as it is (the command line
    reports failures itself). ``context``: what the caller holds for the run
    (:class:`RunContext`; a hot spare joining the run included). The Python API's
    functions and both command lines run through here (``mpi_teleport.api.train`` is
    this function). What it is handed is checked first (one UsageError naming the
    setting) and, under MPI, agreed by every rank before any other collective. SIGINT and
    SIGTERM during the call keep the work: :mod:`mpi_teleport.runtime.signals` says how."""
    from ..runtime.transport import Transport

    context = context or RunContext()
    if context.joining is not None:
        return _join(problem, settings, context)
    if isinstance(comm, str) and comm == "auto":  # (MPI under a launcher, else the simulator)
        from ..runtime.launched import auto_comm

        comm = auto_comm()
    if comm is not None and not isinstance(comm, Transport):
        collective.check_communicator(comm)  # (before any MPI call could fail or hang on it)
    if context.terminator is None and not isinstance(comm, Transport):
        from ..runtime.signals import during_call

        # an API call: a signal stops at an agreed round after a checkpoint, then raises
        # in the script (runtime.signals.during_call), where the script left the handlers
        with during_call(comm is None or comm.Get_rank() == 0) as terminator:
            if terminator is not None:
                return train(problem, settings, comm, replace(context, terminator=terminator))
    transport = comm if isinstance(comm, Transport) else None
    comm = None if transport is not None else comm
    agree_first(settings, transport if transport is not None else comm)
    spec, logging, latency = settings.spec, settings.logging, settings.latency
    out, plan, progress = settings.out, settings.plan, settings.progress
    terminator, pool, meeting = context.terminator, context.pool, context.meeting
    elastic, failures, spares = settings.elastic, settings.failures, settings.spares
    from ..runtime.metrics import Recorder
    from ..runtime.search import SearchRecorder

    problem = with_defaults(problem)
    own_transport, release = None, None
    check_together(spec, latency, logging.naming, elastic=elastic, failures=failures,
                   mpi=transport is not None or comm is not None, spares=spares,
                   spare_ranks=pool is not None)
    if elastic and (transport is not None or comm is not None):
        refuse_without_ulfm()
        from ..elastic.transport import ElasticTransport

        # (a communicator of its own that survives lost ranks; the caller's is left alone)
        transport = own_transport = ElasticTransport(
            transport.comm if transport is not None else comm, pool,
            None if pool is None else pool.node_order())
    elif transport is None and comm is not None:
        # (a plain Transport: its .shrunk is read only when elastic)
        transport = own_transport = Transport.duplicate(comm)  # type: ignore[assignment]
    try:
        # Under the API's own communicator an exception on one rank ends the job (agreed
        # errors pass): the other ranks would otherwise wait for that rank for ever.
        with collective.guard(own_transport):
            root = transport is None or transport.rank == 0
            release = hold_agreed(settings.hold, transport, root)
            # nodes vs ranks, the Problem contract at x0, the same problem on every rank:
            # agreed (one allgather); a step-size function checked every round
            spec = collective.check_start(problem, spec, logging, latency, plan, transport)
            share_cores(problem, transport)
            # (elastic: every rank knows the directory, so that the lowest survivor can
            # take over the writing)
            files = context.files or RunFiles(out if root or elastic else None, writes=root)
            if elastic and not root:
                files.writes = False  # (the caller's: it writes once it is the lowest survivor)
            if settings.record is not None:
                files.config(settings.record)
            bar = (context.progress if context.progress is not None
                   else Progress(spec.algorithm, bool(progress) and root))
            bar.total = max(1, spec.total_rounds)
            recorder_cls = SearchRecorder if spec.algorithm == "search" else Recorder
            recorder = recorder_cls(spec, logging, problem, files, bar if root else None,
                                    settings.problem_name)
            backend = _backend(problem, spec, latency, transport, elastic, failures, spares,
                               settings.agree_every)
            # Overflow to inf/NaN is the run's to report (one line at the next logging
            # round), not numpy's: no RuntimeWarning ahead of that line.
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                try:
                    result = engine.execute(problem, replace(settings, spec=spec), backend,
                                            recorder, terminator=terminator)
                except TooFewSurvivors as exc:  # (every survivor at the same round)
                    if meeting is not None:  # (they meet after the root's line)
                        meeting.hold(own_transport)
                    raise collective.agreed(exc)
                except Exception as exc:  # hot spares: the nodes meet before they leave
                    if isinstance(exc, Terminated):  # (every rank, at the agreed round:
                        backend.close()  # the channels are freed before MPI is finalised)
                    if pool is not None:
                        if meeting is not None:
                            meeting.hold(own_transport)
                        own_transport = None  # (kept for the meeting, not freed below)
                    raise
            backend.close()
            if own_transport is not None and elastic:
                # Every rank past the final share before any leaves: an elastic job ends
                # with os._exit where its records name a loss (also one inherited from the
                # checkpoint it resumed), and under ULFM a rank gone mid-broadcast is a
                # failure to the ranks still receiving (MPI_ERR_OTHER in the final share).
                survivors_meet(own_transport)
                if own_transport.shrunk:  # (freeing a communicator with dead ranks may hang)
                    own_transport = None
            return result
    finally:
        Progress.release_all()  # (a run ended by an exception: the script's streams back)
        if release is not None:
            release()
        if own_transport is not None and not (elastic and own_transport.shrunk):
            own_transport.free()  # (after a loss and an error: left alone, the job aborts)


def _join(problem, settings: RunSettings, context: RunContext) -> engine.Result:
    """A hot spare that took a node over at round r (``context.joining``: r and what
    ``pool.reform`` returned: the dead, {node: spare}, the nodes' communicator and order):
    the rest of the run as that node (:func:`engine.execute` entered at round r,
    ``joining``). The job then ends as after any loss (the survivors meet; after an
    exception, through ``context.meeting``). Its settings were agreed when the job
    started; the survivors' round and tokens come with the reformed communicator."""
    from ..elastic.backend import ElasticBackend
    from ..runtime.metrics import Recorder
    from ..elastic.transport import ElasticTransport

    check_handed(settings)
    pool, meeting = context.pool, context.meeting
    r, reformed = context.joining  # type: ignore[misc]
    problem = with_defaults(problem)
    if pool.host_nodes:  # (threads="auto": the share its neighbours on this host took)
        share_cores(problem, None, max(1, pool.host_nodes))
    _, replaced, comm, living = reformed
    transport = ElasticTransport(comm, pool, living, joined=True)
    transport.shrunk, transport.replaced = True, dict(replaced)
    files = RunFiles(settings.out, writes=False)  # (it writes once it is the lowest survivor)
    recorder = Recorder(settings.spec, settings.logging, problem, files, None,
                        settings.problem_name)
    backend = ElasticBackend(problem, settings.spec, transport,
                             agree_every=settings.agree_every)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        try:
            result = engine.execute(problem, settings, backend, recorder,
                                    terminator=context.terminator, joining=r)
        except TooFewSurvivors as exc:
            if meeting is not None:
                meeting.hold(transport)
            raise collective.agreed(exc)
        except Exception:  # (the nodes meet before they leave)
            if meeting is not None:
                meeting.hold(transport)
            raise
    backend.close()
    survivors_meet(transport)
    return result


# The groups of a RunSettings and what each must be (mt.train checks what it is handed).
_GROUPS = {"spec": RunSpec, "logging": Logging, "latency": LatencySettings}


def check_handed(settings) -> None:
    """What :func:`train` is handed, checked as the API's keywords are (the settings
    table's rules, :func:`~mpi_teleport.session.settings.check_run`): a RunSettings whose
    groups are what they must be and whose every value keeps its rule; UsageError (one
    line, naming the setting) otherwise."""
    if not isinstance(settings, RunSettings):
        raise UsageError(f"settings: expected mpi_teleport.RunSettings(spec=mpi_teleport.RunSpec("
                         f"...), ...), got {type(settings).__name__} {settings!r:.60}")
    for name, cls in _GROUPS.items():
        if not isinstance(getattr(settings, name), cls):
            raise UsageError(f"RunSettings.{name}: expected a {cls.__name__}, got "
                             f"{getattr(settings, name)!r:.60}")
    if settings.plan is not None and not isinstance(settings.plan, CheckpointPlan):
        raise UsageError(f"RunSettings.plan: expected a CheckpointPlan or None, got "
                         f"{settings.plan!r:.60}")
    check_run(settings)


def agreement(settings) -> dict:
    """What every rank must hold alike of ``settings``: each setting the table marks
    ``agree`` that a RunSettings carries (:attr:`~.settings.Setting.where`), as a
    comparable value (a function by its values or name, an optimizer's rule by its
    description). Generated from the table: a new row is agreed without a line here."""
    out = {}
    for setting in rows():
        if setting.agree and setting.where is not None:
            value = held(settings, setting.where)
            if value is not ABSENT:
                out[setting.name] = _comparable(value)
    return out


def _comparable(value):
    """A setting's value as the ranks compare it (pickled in one allgather)."""
    from ..core import topology as topo
    from ..core.optimizers import Adam, SgdDecay, TorchRule

    if value is None or isinstance(value, (bool, int, str)) and type(value) in (bool, int, str):
        return value
    if isinstance(value, float):
        return value if type(value) is float else [type(value).__name__, float(value)]
    if isinstance(value, (tuple, list)):
        return [_comparable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (Adam, SgdDecay, TorchRule)):  # an optimizer's rule: its own words
        return value.describe()
    if callable(value):
        try:  # (a step size or topology function: its first values)
            return [repr(value(t)) for t in range(2)]
        except Exception:  # noqa: BLE001  (k, t) -> W: a topology
            return topo.describe(value)
    return repr(value)


def agree_first(settings, transport) -> None:
    """The first step of :func:`train`: ``settings`` checked (:func:`check_handed`), and
    under MPI (``transport``: the command line's Transport or the caller's communicator)
    every rank holding the same, in one allgather before any collective whose use
    depends on a setting; one agreed UsageError on every rank otherwise."""
    if transport is None:
        check_handed(settings)
        return
    from ..runtime.transport import Transport

    if not isinstance(transport, Transport):
        collective.check_communicator(transport)  # (before any MPI call could hang on it)
    error, agreed = None, None
    try:
        check_handed(settings)
        agreed = agreement(settings)
    except UsageError as exc:
        error = str(exc)
    collective.agree_on_settings(transport, error, agreed)


def share_cores(problem, transport, ranks_on_host: int | None = None) -> None:
    """A problem computing with threads="auto" (TorchProblem) learns how many ranks share
    its host (a shared-memory split of the run's communicator, collective; every rank
    builds the same problem, so all or none take part); in the simulator it keeps all
    the host's cores. ``ranks_on_host``: known already (a hot spare taking a node over)."""
    settings = getattr(getattr(problem, "problem", problem), "torch_settings", None)
    if settings is None or not getattr(settings, "auto", False):
        return
    if ranks_on_host is not None:
        settings.share_host(ranks_on_host)
    elif transport is not None:  # (the MPI runtime's Transport)
        settings.share_host(transport.ranks_on_host())


def hold_agreed(dirs, transport, root: bool, refused: str | None = None):
    """The one lock and start-up agreement of every entry point (the API, and the MPI
    command line after its settings are agreed): lock ``dirs`` ((path, name) pairs) on
    the root unless this process is ``refused`` (its one-line reason not to run), then
    every process learns the first refusal in one allgather (a directory another job
    holds, a damaged checkpoint seen by one rank) and raises it together: UsageError,
    marked agreed (it passes :func:`collective.guard`). Returns the release function
    (None when nothing was locked)."""
    if not dirs and transport is None and refused is None:
        return None
    from ..disk.paths import hold_dirs

    release, error = None, refused
    if root and error is None and dirs:
        try:
            release = hold_dirs(dirs)
        except UsageError as exc:
            error = str(exc)
    if transport is not None:  # one allgather: the first process's reason, as it said it
        error = next((e for e in transport.allgather(error) if e), None)
    if error:
        if release is not None:
            release()
        raise collective.agreed(UsageError(error)) if transport is not None else UsageError(error)
    return release


def _backend(problem, spec: RunSpec, latency: LatencySettings, transport, elastic=False,
             failures=(), spares=0, agree_every=1):
    if transport is None:
        from ..runtime.backends.local import LocalBackend

        oracle = None
        if latency.active:
            from ..latency.virtual_clock import for_run

            oracle = for_run(spec, latency, problem.dim, problem.dtype.itemsize)
        if elastic or failures:  # (the failure plan the MPI runtime would detect)
            from ..elastic.simulated import SimulatedElasticBackend

            return SimulatedElasticBackend(problem, spec, oracle, failures, spares=spares)
        return LocalBackend(problem, spec, oracle)
    if elastic:
        from ..elastic.backend import ElasticBackend

        return ElasticBackend(problem, spec, transport, agree_every=agree_every)
    from ..runtime.backends.mpi import MpiBackend

    if latency.active:
        from ..latency import LatencyTransport, TimedProblem, parse_spec, warn_oversubscribed

        model = parse_spec(latency.spec, spec.nodes)
        if model.host_auto:  # (collective: every rank builds its layer here)
            model = model.placed(transport.host_ids())
        layer = LatencyTransport(transport, model, latency.clock)
        warn_oversubscribed(layer)
        transport, problem = layer, TimedProblem(problem, layer, latency)
    return MpiBackend(problem, spec, transport)
