"""The public Python API: Teleportation, Decentralized SGD and Algorithm 2 on any problem.

Each function runs in this process when ``comm`` is None (the simulator: every node
here) or with one node per MPI rank when ``comm`` is an mpi4py communicator (the
package works on a duplicate of it, freed at the end). The same call gives the same
records, bit for bit, either way.

What a call does when something is wrong (details: ``mpi_teleport/DESIGN.md`` section 9.1,
``jobs/README.md`` "What happens on failure"):

* **Bad arguments** and a **problem that breaks its contract** at the initial model
  (``initial()`` of the wrong shape, dtype or with NaN; ``gradient()`` returning None, the
  wrong shape or dtype, or NaN at x0; a step-size function returning a negative, NaN or
  non-number for the first or last rounds): :class:`~mpi_teleport.UsageError`, one line
  naming the method and what it must return, before anything runs. Under MPI every rank
  raises the same error together (the ranks agree in one collective), also when ranks
  differ: another ``initial()`` (a model built without a common seed), dim, dtype or
  settings than rank 0's, naming the ranks.
* **Under MPI, an exception on one rank once the rounds run** (the user's ``gradient``
  raising, a contract violation at a rank's first step, a step size turning negative):
  the failing rank prints ``[rank r] ...`` (one line, or the traceback of a foreign
  exception) and calls ``MPI_Abort``: the whole job ends, non-zero, whether or not the
  script catches the exception (the other ranks wait for that rank and could never learn
  of it). In the simulator the exception is raised as it is.
* **Errors all ranks meet together** stay catchable on every rank: a non-finite metric
  (:class:`~mpi_teleport.NonFiniteError`; at round 0 it names the data, not the step
  size), an ``evaluate()`` returning no dict or lacking the metric, a directory another
  run holds.
* ``comm=`` an intercommunicator, a freed communicator or not a communicator:
  ``UsageError``. ``comm=None`` inside an MPI job of several processes warns
  (:class:`~mpi_teleport.collective.MpiJobWarning`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from . import collective, engine
from . import topology as topo
from .checkpoint import Plan, locate
from .errors import UsageError
from .output import RunFiles
from .problem import with_defaults
from .progress import Progress
from .spec import LatencySettings, Logging, RunSpec

__all__ = ["teleportation", "dsgd", "search_k"]


def teleportation(problem, *, nodes: int, k: int, rounds: int, lr: float | Callable[[int], float],
                  topology: str | Callable = "ring", momentum: float = 0.0,
                  variant: str = "overlap", seed: int = 0, comm=None, log_every: int = 10,
                  target: float | None = None, stop_at_target: bool = False,
                  out: str | Path | None = None, checkpoint_every: int = 0,
                  checkpoint_dir: str | Path | None = None, keep_checkpoints: int = 2,
                  resume: str | Path | None = None, latency: str = "none", clock: str = "real",
                  compute_time: float | None = None, progress: bool = False) -> engine.Result:
    """Train with Teleportation (Takezawa & Stich, ICLR 2025).

    In each round only k of the n nodes are active: they take the models (tokens) of the
    previous round's active nodes, take an SGD step on their own data and gossip over
    ``topology`` among themselves.

    Parameters
    ----------
    problem : Problem
        The training problem (:class:`mpi_teleport.Problem`, e.g. a
        :class:`mpi_teleport.TorchProblem`). Under MPI every rank passes its own,
        identically built instance.
    nodes : int
        n, the number of nodes (under MPI: the communicator's size).
    k : int
        Active nodes (tokens) per round, 1 <= k <= n.
    rounds : int
        T, rounds to run.
    lr : float or callable
        Step size, or a function of the round t.
    topology : str or callable
        ``ring``, ``torus``, ``exp``, ``onepeer-exp``, ``base2``, ``complete``, or a
        function ``(k, t) -> W`` returning a k x k doubly stochastic matrix.
    momentum : float
        Heavy-ball momentum in [0, 1); it travels with its token.
    variant : {'overlap', 'simple'}
        Algorithm 3 (one communication phase per round) or Algorithm 1.
    seed : int
        Keys every random number: same seed, same numbers, on any back end.
    comm : mpi4py communicator or None
        None: the simulator, all n nodes in this process. A communicator: one node per
        rank.
    log_every : int
        Evaluate and record every this many rounds (and the first and last).
    target, stop_at_target
        ``rounds_to_target`` is the first logged round whose metric reaches ``target``;
        with ``stop_at_target`` the run ends there.
    out : path or None
        Directory for config.json, metrics.jsonl and summary.json (root only).
    checkpoint_every, checkpoint_dir, keep_checkpoints, resume
        Periodic checkpoints (default directory ``out/checkpoints``) and resuming from a
        run, checkpoint or round-* directory; a resumed run's records equal an
        uninterrupted run's.
    latency, clock, compute_time
        The latency layer (``none``, ``const:US``, ``mod:TAU``, ``matrix:FILE.csv``,
        optionally ``,bw:GBPS``), ``real`` or ``virtual`` clock, and the modelled compute
        time per step in microseconds. Records then carry ``virtual_time_s``.
    progress : bool
        A progress bar on stderr (root).

    Returns
    -------
    Result
        ``summary``, ``records``, the averaged final model ``x`` and ``k``.

    Raises
    ------
    UsageError
        Bad arguments, a problem breaking its contract, ranks that differ (every rank
        together under MPI); see the module docstring.
    NonFiniteError
        The metric became NaN or infinite (every rank together).

    Under MPI an exception on a single rank during the rounds ends the job with
    ``MPI_Abort`` after printing that rank's message (module docstring).

    Examples
    --------
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> result = mt.teleportation(Quadratic(n=16, d=5, sigma2=1.0, zeta2=1.0), nodes=16,
    ...                           k=4, rounds=200, lr=0.05)
    >>> result.summary["k"], len(result.x)
    (4, 5)
    """
    spec = RunSpec("teleportation", nodes, k, rounds, lr, momentum, topology, variant, seed)
    return _api_run(problem, spec, locals())


def dsgd(problem, *, nodes: int, rounds: int, lr: float | Callable[[int], float],
         topology: str | Callable = "ring", momentum: float = 0.0, seed: int = 0, comm=None,
         log_every: int = 10, target: float | None = None, stop_at_target: bool = False,
         out: str | Path | None = None, checkpoint_every: int = 0,
         checkpoint_dir: str | Path | None = None, keep_checkpoints: int = 2,
         resume: str | Path | None = None, latency: str = "none", clock: str = "real",
         compute_time: float | None = None, progress: bool = False) -> engine.Result:
    """Train with Decentralized SGD: every node active every round, node m always holds
    replica m, gossip over ``topology`` among all n nodes.

    Parameters are those of :func:`teleportation` (without ``k`` and ``variant``).

    Examples
    --------
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> mt.dsgd(Quadratic(n=8, d=3), nodes=8, rounds=50, lr=0.05).k
    8
    """
    spec = RunSpec("dsgd", nodes, nodes, rounds, lr, momentum, topology, "overlap", seed)
    return _api_run(problem, spec, locals())


def search_k(problem, *, nodes: int, rounds: int, lr: float | Callable[[int], float],
             topology: str | Callable = "ring", momentum: float = 0.0,
             variant: str = "overlap", seed: int = 0, comm=None, log_every: int = 10,
             target: float | None = None, out: str | Path | None = None,
             latency: str = "none", clock: str = "real", compute_time: float | None = None,
             progress: bool = False, select: str = "averaged") -> engine.Result:
    """Algorithm 2: choose k with 2T rounds instead of n T.

    Phase 1 runs Teleportation with k = n for T = ``rounds`` rounds; phase 2 runs every
    candidate k in {1, 2, 4, ...} concurrently on disjoint nodes for T rounds and keeps
    the best by the problem's validation metric (``validate``; default: the averaged
    model's ``metric``) under the criterion ``select``. Averaging k tokens removes their
    noise, which favours large k under ``'averaged'``; ``'tokens'`` also counts how far the
    tokens are from each other. Every criterion is computed whichever chooses:
    ``summary["candidates_by_criterion"]`` and ``summary["k_by_criterion"]``.

    Parameters
    ----------
    select : {'averaged', 'tokens', 'time-average'}
        Which number decides, since the paper leaves "best" open (the command line's
        ``--k-select``): ``'averaged'`` (default) the averaged model's validation metric at
        the candidate's last round; ``'tokens'`` the mean over the candidate's tokens of
        each token's own validation metric (``validate`` of a one-row matrix; for the
        synthetic problem the mean of ||x_m - x*||^2, what ``target`` measures);
        ``'time-average'`` the averaged model's validation metric averaged over the
        logged rounds of the candidate's phase after its first step (every round with
        ``log_every=1``; the nearest to the paper's theory criterion, a time-averaged
        gradient norm).

    Parameters are otherwise those of :func:`teleportation`.

    Returns
    -------
    Result
        ``k`` is the chosen k, ``candidates`` every candidate's value under ``select``,
        ``x`` the chosen run's averaged model.

    Examples
    --------
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> result = mt.search_k(Quadratic(n=7, d=4, sigma2=1.0), nodes=7, rounds=40, lr=0.05)
    >>> sorted(result.candidates, key=int)
    ['1', '2', '4', '7']
    """
    from .search import check_select

    spec = RunSpec("search", nodes, None, rounds, lr, momentum, topology, variant, seed,
                   check_select(select))
    return _api_run(problem, spec, locals())


# ------------------------------------------------------------------------------ shared
def _api_run(problem, spec: RunSpec, args: dict) -> engine.Result:
    comm = args.get("comm")
    view = None
    if comm is not None:
        from .transport import Transport

        collective.check_communicator(comm)
        view = Transport(comm)  # (the caller's communicator, for one allgather; not freed)
    else:
        collective.warn_if_in_mpi_job()  # every process of an mpirun job simulating alone?
    # Under MPI a refusal on some ranks only (a checkpoint file only rank 0 cannot read, a
    # path one host lacks) is raised on every rank: the others would wait in run().
    with collective.agreeing(view):
        prepared = _prepare(problem, spec, args)
    return run(problem, spec, **prepared)


def _prepare(problem, spec: RunSpec, args: dict) -> dict:
    """The API's arguments checked and turned into :func:`run`'s keyword arguments."""
    check_spec(spec)
    logging = Logging(_positive_int(args["log_every"], "log_every"), args.get("target"),
                      bool(args.get("stop_at_target", False)))
    latency = LatencySettings(args.get("latency") or "none", args.get("clock", "real"),
                              args.get("compute_time"))
    out = Path(args["out"]).resolve() if args.get("out") is not None else None
    every = int(args.get("checkpoint_every") or 0)
    ck_dir = args.get("checkpoint_dir")
    ck_dir = Path(ck_dir).resolve() if ck_dir is not None else (out / "checkpoints" if out else None)
    plan = Plan(ck_dir, every, int(args.get("keep_checkpoints", 2)))
    if every and ck_dir is None:
        raise UsageError("checkpoint_every needs a place to write: give out= or checkpoint_dir=")
    if args.get("resume") is not None:
        found = locate(Path(args["resume"]), spec.algorithm)
        if found is None:
            raise UsageError(f"resume={args['resume']}: no complete checkpoint of a "
                             f"{spec.algorithm} run there")
        plan.source, plan.manifest = found
    settings = {"algorithm": spec.algorithm, "nodes": spec.nodes, "k": spec.tokens,
                "rounds": spec.rounds, "lr": spec.lr if not callable(spec.lr) else "callable",
                "momentum": spec.momentum, "topology": topo.describe(spec.topology),
                "variant": spec.variant, "seed": spec.seed, "latency": latency.spec,
                "clock": latency.clock, "compute_time": latency.compute_time}
    hold = [(path, what) for path, what in ((out, "out"), (ck_dir, "checkpoint_dir"))
            if path is not None and (what == "out" or every)]
    if spec.algorithm == "search":
        settings["k_select"] = spec.k_select
    return dict(logging=logging, latency=latency, comm=args.get("comm"), out=out, plan=plan,
                settings=settings, progress=bool(args.get("progress")),
                config_record={**settings, **with_defaults(problem).describe()}, hold=hold)


def check_spec(spec: RunSpec) -> None:
    """Refuse settings no run can have, with what to do (UsageError)."""
    n = _positive_int(spec.nodes, "nodes")
    _positive_int(spec.rounds, "rounds")
    if spec.algorithm == "teleportation":
        k = spec.k
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise UsageError(f"k must be an integer with 1 <= k <= nodes = {n}, got {k!r}")
    if not callable(spec.lr) and not (isinstance(spec.lr, (int, float)) and math.isfinite(spec.lr)
                                      and spec.lr > 0):
        raise UsageError(f"lr must be a number > 0 or a function of the round, got {spec.lr!r}")
    if not 0 <= spec.momentum < 1:
        raise UsageError(f"momentum must be in [0, 1), got {spec.momentum}")
    if spec.variant not in ("overlap", "simple"):
        raise UsageError(f"variant must be 'overlap' (Algorithm 3) or 'simple' (Algorithm 1), "
                         f"got {spec.variant!r}")
    if not callable(spec.topology) and spec.topology not in topo.TOPOLOGIES:
        raise UsageError(f"unknown topology {spec.topology!r}; choose one of "
                         f"{', '.join(topo.TOPOLOGIES)} or pass a function (k, t) -> W")


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def run(problem, spec: RunSpec, logging: Logging, latency: LatencySettings, *, comm=None,
        transport=None, out: Path | None = None, plan: Plan | None = None,
        settings: dict | None = None, progress: bool | Progress = False, terminator=None,
        resume_from=None, problem_name: str | None = None, files: RunFiles | None = None,
        config_record: dict | None = None, hold=(), summary_extra: dict | None = None
        ) -> engine.Result:
    """Run one spec on the back end ``comm``/``transport`` ask for (shared by the API and
    the command lines). ``transport``: an existing Transport (the CLI's); ``comm``: a
    communicator to duplicate; neither: the simulator. ``settings`` go into checkpoint
    manifests, ``config_record`` into config.json (root). ``hold``: (directory, name)
    pairs the root locks for the run (a directory another job holds is a UsageError on
    every process)."""
    from .metrics import Recorder
    from .search import SearchRecorder

    problem = with_defaults(problem)
    own_transport, release = None, None
    if transport is None and comm is not None:
        from .transport import Transport

        collective.check_communicator(comm)
        transport = own_transport = Transport.duplicate(comm)
    try:
        # Under the API's own communicator an exception on one rank ends the job (agreed
        # errors pass): the other ranks would otherwise wait for that rank for ever.
        with collective.guard(own_transport):
            root = transport is None or transport.rank == 0
            spec = collective.check_start(problem, spec, logging, latency, plan, transport)
            release = _hold(hold, transport, root)
            if files is None:
                files = RunFiles(out if root else None)
            if config_record is not None:
                files.config(config_record)
            bar = progress if isinstance(progress, Progress) else Progress(spec.algorithm, bool(progress) and root)
            bar.total = max(1, spec.total_rounds)
            recorder_cls = SearchRecorder if spec.algorithm == "search" else Recorder
            recorder = recorder_cls(spec, logging, problem, files, bar if root else None, problem_name)
            backend = _backend(problem, spec, latency, transport)
            # Overflow to inf/NaN is the run's to report (one line at the next logging
            # round), not numpy's: no RuntimeWarning ahead of that line.
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                result = engine.execute(problem, spec, logging, backend, recorder, plan=plan,
                                        settings=settings, terminator=terminator,
                                        resume_from=resume_from, summary_extra=summary_extra)
            backend.close()
            return result
    finally:
        if release is not None:
            release()
        if own_transport is not None:
            own_transport.free()


def _hold(dirs, transport, root: bool):
    """Lock ``dirs`` on the root; every process learns a refusal together (UsageError)."""
    if not dirs:
        return None
    from . import preflight

    release, error = None, None
    if root:
        try:
            release = preflight.hold_dirs(dirs)
        except UsageError as exc:
            error = str(exc)
    if transport is not None:  # (as signals.agree_on_error: one allgather)
        error = next((e for e in transport.allgather(error) if e), None)
    if error:
        if release is not None:
            release()
        raise collective.agreed(UsageError(error))
    return release


def _backend(problem, spec: RunSpec, latency: LatencySettings, transport):
    if transport is None:
        from .backends.local import LocalBackend

        oracle = None
        if latency.active:
            from .virtual_clock import for_run

            oracle = for_run(spec, latency, problem.dim, problem.dtype.itemsize)
        return LocalBackend(problem, spec, oracle)
    from .backends.mpi import MpiBackend

    if latency.active:
        from .latency import LatencyTransport, TimedProblem, parse_spec, warn_oversubscribed

        layer = LatencyTransport(transport, parse_spec(latency.spec, spec.nodes), latency.clock)
        warn_oversubscribed(layer)
        transport, problem = layer, TimedProblem(problem, layer, latency.compute_time)
    return MpiBackend(problem, spec, transport)
