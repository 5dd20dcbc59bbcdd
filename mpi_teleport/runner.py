"""One run of a spec on the back end asked for: the simulator, or one node per MPI rank.

Shared by the Python API (:mod:`mpi_teleport.api`) and the command lines
(:func:`mpi_teleport.cli.run_config`): it holds the output directories (one lock path for
both), builds the back end (with the latency layer where asked), and hands the run to
the engine (:func:`mpi_teleport.engine.execute`). The inputs arrive validated
(:mod:`mpi_teleport.settings`, :mod:`mpi_teleport.resume`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from . import collective, engine
from .checkpoint import CheckpointPlan
from .elastic import TooFewSurvivors
from .errors import UsageError
from .output import RunFiles
from .problem import with_defaults
from .progress import Progress
from .settings import CLI, Naming
from .spec import LatencySettings, Logging, RunSpec


def train(problem, spec: RunSpec, logging: Logging, latency: LatencySettings, *, comm=None,
          transport=None, out: Path | None = None, plan: CheckpointPlan | None = None,
          settings: dict | None = None, progress: bool | Progress = False, terminator=None,
          resume_from=None, problem_name: str | None = None, files: RunFiles | None = None,
          config_record: dict | None = None, hold=(), summary_extra: dict | None = None,
          refused: str | None = None, callback=None, elastic: bool = False,
          failures=(), spares: int = 0, pool=None, agree_every: int = 1) -> engine.Result:
    """Run one spec on the back end ``comm``/``transport`` ask for (shared by the API and
    the command lines). ``transport``: an existing Transport (the CLI's); ``comm``: a
    communicator to duplicate; neither: the simulator. ``settings`` go into checkpoint
    manifests, ``config_record`` into config.json (root). ``hold``: (directory, name)
    pairs the root locks for the run (a directory another job holds is a UsageError on
    every process). ``refused``: this process's one-line reason not to run (its checks of
    the inputs against the disk failed); every process learns the first process's reason
    in the same collective as the locks, so all stop together with it (UsageError).
    ``callback(record)``: on the root after each logged round (:func:`engine.execute`).
    ``spares``: hot spares (elastic mode); under MPI ``pool``, the
    :class:`~mpi_teleport.transport.SparePool` of the job (the command line's)."""
    from .metrics import Recorder
    from .search import SearchRecorder

    problem = with_defaults(problem)
    own_transport, release = None, None
    # (the oracle sizes state as momentum; state_slots > 1: an optimizer's, never None)
    if spec.state_slots > 1 and spec.optimizer is not None and latency.active:
        raise UsageError(f"optimizer={spec.optimizer.name} does not run under the latency layer "
                         "yet; drop latency=/clock=/compute_time= or use SGD (momentum=)")
    if elastic:
        check_elastic(spec, latency, transport is not None or comm is not None, failures,
                      logging.naming, spares, pool)
    if elastic and (transport is not None or comm is not None):
        from .transport import ElasticTransport

        # (a communicator of its own that survives lost ranks; the caller's is left alone)
        transport = own_transport = ElasticTransport(
            transport.comm if transport is not None else comm, pool,
            None if pool is None else pool.node_order())
    elif transport is None and comm is not None:
        from .transport import Transport

        # (a plain Transport: its .shrunk is read only when elastic)
        transport = own_transport = Transport.duplicate(comm)  # type: ignore[assignment]
    try:
        # Under the API's own communicator an exception on one rank ends the job (agreed
        # errors pass): the other ranks would otherwise wait for that rank for ever.
        with collective.guard(own_transport):
            root = transport is None or transport.rank == 0
            release = hold_agreed(hold, transport, root, refused)
            # nodes vs ranks, the Problem contract at x0, the same problem and settings on
            # every rank: agreed (one allgather); a step-size function checked every round
            spec = collective.check_start(problem, spec, logging, latency, plan, transport)
            share_cores(problem, transport)
            if files is None:
                files = RunFiles(out if root or elastic else None, writes=root)
            elif elastic and not root:
                files.writes = False
            if config_record is not None:
                files.config(config_record)
            bar = progress if isinstance(progress, Progress) else Progress(spec.algorithm, bool(progress) and root)
            bar.total = max(1, spec.total_rounds)
            recorder_cls = SearchRecorder if spec.algorithm == "search" else Recorder
            recorder = recorder_cls(spec, logging, problem, files, bar if root else None, problem_name)
            backend = _backend(problem, spec, latency, transport, elastic, failures, spares,
                               agree_every)
            # Overflow to inf/NaN is the run's to report (one line at the next logging
            # round), not numpy's: no RuntimeWarning ahead of that line.
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                try:
                    result = engine.execute(problem, spec, logging, backend, recorder, plan=plan,
                                            settings=settings, terminator=terminator,
                                            resume_from=resume_from, summary_extra=summary_extra,
                                            callback=callback)
                except TooFewSurvivors as exc:  # (every survivor at the same round)
                    exc.meet = lambda: _survivors_meet(own_transport)  # (after the root's line)
                    raise collective.agreed(exc)
                except Exception as exc:  # hot spares: the nodes meet before they leave
                    if pool is not None:
                        meeting = own_transport  # (kept for the meeting, not freed below)
                        # (any exception: run.py reads it with getattr)
                        exc.meet = lambda: _survivors_meet(meeting)  # type: ignore[attr-defined]
                        own_transport = None
                    raise
            backend.close()
            if own_transport is not None and elastic and own_transport.shrunk:
                _survivors_meet(own_transport)  # (freeing a communicator with dead ranks may hang)
                own_transport = None
            return result
    finally:
        if release is not None:
            release()
        if own_transport is not None and not (elastic and own_transport.shrunk):
            own_transport.free()  # (after a loss and an error: left alone, the job aborts)


def join(problem, spec: RunSpec, logging: Logging, pool, r: int, reformed, *,
         out: Path | None = None, plan: CheckpointPlan | None = None,
         settings: dict | None = None, terminator=None, resume_from=None,
         problem_name: str | None = None, summary_extra: dict | None = None,
         agree_every: int = 1) -> engine.Result:
    """A hot spare that took a node over at round r (``reformed``: what ``pool.reform``
    returned: the dead, {node: spare}, the nodes' communicator and order): the rest of the
    run as that node
    (:func:`engine.join`). The job then ends as after any loss (the survivors meet)."""
    from .backends.elastic import ElasticBackend
    from .metrics import Recorder
    from .transport import ElasticTransport

    problem = with_defaults(problem)
    if pool.host_nodes:  # (threads="auto": the share its neighbours on this host took)
        share_cores(problem, None, max(1, pool.host_nodes))
    _, replaced, comm, living = reformed
    transport = ElasticTransport(comm, pool, living, joined=True)
    transport.shrunk, transport.replaced = True, dict(replaced)
    files = RunFiles(out, writes=False)  # (it writes once it is the lowest survivor)
    recorder = Recorder(spec, logging, problem, files, None, problem_name)
    backend = ElasticBackend(problem, spec, transport, agree_every=agree_every)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        try:
            result = engine.join(problem, spec, logging, backend, recorder, r, plan=plan,
                                 settings=settings, terminator=terminator,
                                 resume_from=resume_from, summary_extra=summary_extra)
        except TooFewSurvivors as exc:
            exc.meet = lambda: _survivors_meet(transport)
            raise collective.agreed(exc)
        except Exception as exc:  # (the nodes meet before they leave)
            # (any exception: run.py reads it with getattr)
            exc.meet = lambda: _survivors_meet(transport)  # type: ignore[attr-defined]
            raise
    backend.close()
    _survivors_meet(transport)
    return result


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
    elif transport is not None and hasattr(transport, "ranks_on_host"):
        settings.share_host(transport.ranks_on_host())


def _survivors_meet(transport) -> None:
    """Elastic, after a loss: every survivor is done before any leaves (the command line
    then ends with os._exit: MPI_Finalize may wait on the dead)."""
    from .errors import RankLost

    try:
        transport.barrier()
    except RankLost:
        pass


def check_elastic(spec: RunSpec, latency: LatencySettings, mpi: bool, failures,
                  naming: Naming = CLI, spares: int = 0, pool=None) -> None:
    """What elastic mode cannot do, refused with what to do (UsageError), its settings
    spelt as the entry point spells them (``--elastic`` or ``elastic``)."""
    n = naming.name
    mode = f"elastic mode ({n('elastic')}, {n('fail')})"
    if mpi and spares and pool is None:
        raise UsageError("spares under MPI: the spare ranks wait outside the run, which only "
                         "the command line arranges; use mpirun -n N+S python -m "
                         "mpi_teleport.run --elastic --spares S")
    if spec.algorithm == "search":
        raise UsageError(f"{mode} runs Teleportation or DSGD, not "
                         f"{'--k auto' if naming.cli else 'search_k'}; choose k")
    if spec.state_slots > 1 and spec.optimizer is not None:  # (> 1: an optimizer's)
        raise UsageError(f"{mode} runs SGD (with momentum), not optimizer={spec.optimizer.name}")
    if latency.active:
        raise UsageError(f"{mode} does not run under the latency layer; drop "
                         f"{n('latency')}/{n('clock')}/{n('compute_time')}")
    if mpi and failures:
        raise UsageError(f"{n('fail')} is the simulator's failure plan; under MPI, "
                         f"{n('elastic')} detects lost ranks itself")
    if mpi:
        from .transport import ulfm_problem

        problem = ulfm_problem()
        if problem:
            raise UsageError(problem)


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
    from .paths import hold_dirs

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
        from .backends.local import LocalBackend

        oracle = None
        if latency.active:
            from .virtual_clock import for_run

            oracle = for_run(spec, latency, problem.dim, problem.dtype.itemsize)
        return LocalBackend(problem, spec, oracle, failures, elastic=elastic, spares=spares)
    if elastic:
        from .backends.elastic import ElasticBackend

        return ElasticBackend(problem, spec, transport, agree_every=agree_every)
    from .backends.mpi import MpiBackend

    if latency.active:
        from .latency import LatencyTransport, TimedProblem, parse_spec, warn_oversubscribed

        model = parse_spec(latency.spec, spec.nodes)
        if model.host_auto:  # (collective: every rank builds its layer here)
            model = model.placed(transport.host_ids())
        layer = LatencyTransport(transport, model, latency.clock)
        warn_oversubscribed(layer)
        transport, problem = layer, TimedProblem(problem, layer, latency.compute_time)
    return MpiBackend(problem, spec, transport)
