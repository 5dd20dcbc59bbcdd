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
  run holds, a checkpoint refused on any rank.
* ``comm=`` an intercommunicator, a freed communicator or not a communicator:
  ``UsageError``. ``comm=None`` inside an MPI job of several processes warns
  (:class:`~mpi_teleport.collective.MpiJobWarning`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import collective, engine, runner
from .algorithms import Nesterov
from .loop_options import momentum_of, rounds_for, within_phase
from . import resume as resume_rules
from . import topology as topo
from .checkpoint import CheckpointPlan, any_checkpoint, locate
from .elastic import parse_failures
from .errors import UsageError
from .latency.model import parse_spec
from .paths import absolute, check_writable
from .problem import with_defaults
from .settings import API, check_checkpoints, check_k, check_values, flag
from .spec import LatencySettings, Logging, RunSpec

__all__ = ["teleportation", "dsgd", "search_k"]


def teleportation(problem, *, nodes: int, k: int, rounds: int | None = None,
                  lr: float | Callable[[int], float], epochs: float | None = None,
                  topology: str | Callable = "ring", momentum: float = 0.0,
                  nesterov: bool = False, variant: str = "overlap", seed: int = 0, comm=None,
                  log_every: int = 10,
                  target: float | None = None, stop_at_target: bool = False,
                  out: str | Path | None = None, checkpoint_every: int = 0,
                  checkpoint_dir: str | Path | None = None, keep_checkpoints: int = 2,
                  resume: str | Path | None = None, latency: str = "none", clock: str = "real",
                  compute_time: float | None = None, progress: bool = False,
                  callback: Callable[[dict], object] | None = None,
                  elastic: bool = False, fail=None) -> engine.Result:
    """Train with Teleportation (Takezawa & Stich, ICLR 2025).

    In each round only k of the n nodes are active: they take the models (tokens) of the
    previous round's active nodes, take an SGD step on their own data and gossip over
    ``topology`` among themselves.

    Parameters
    ----------
    problem : Problem
        The training problem (:class:`mpi_teleport.Problem`, e.g. a
        :class:`mpi_teleport.TorchProblem`). Under MPI every rank passes its own,
        identically built instance. A problem with a ``nodes`` attribute must agree
        with ``nodes``.
    nodes : int
        n, the number of nodes (under MPI: the communicator's size).
    k : int
        Active nodes (tokens) per round, 1 <= k <= n.
    rounds : int
        T, rounds to run; or give ``epochs``.
    epochs : float
        Instead of ``rounds``: passes over the training data, for a problem that knows
        ``n_train`` and ``batch_size`` (a TorchProblem): ``rounds = ceil(epochs *
        n_train / (batch_size * active))``, active = k (n for DSGD and for each phase
        of :func:`search_k`).
    lr : float or callable
        Step size, or a function of the round t (in :func:`search_k`, of the round
        within its phase: both phases start at t = 0).
    topology : str or callable
        ``ring``, ``torus``, ``exp``, ``onepeer-exp``, ``base2``, ``complete``, or a
        function ``(k, t) -> W`` returning a k x k doubly stochastic matrix.
    momentum : float
        Heavy-ball momentum in [0, 1); it travels with its token.
    nesterov : bool
        Take the momentum in Nesterov's form, as ``torch.optim.SGD(nesterov=True)``:
        v = mu v + g, x -= lr (g + mu v). Needs ``momentum > 0``.
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
    callback : callable, optional
        ``callback(record)``, called on the root with a copy of each record (the dict
        written to metrics.jsonl) after each logged round; a true return value stops the
        run there (custom early stopping). Ready ones: :class:`mpi_teleport.CsvWriter`,
        :class:`mpi_teleport.TensorBoardWriter` (:mod:`mpi_teleport.loggers`).
    elastic, fail
        Elastic mode (mpi_teleport/DESIGN.md §11): under MPI (``comm`` of an Open MPI
        job started with ``mpirun --with-ft ulfm``) the run goes on with the survivors
        when ranks die; ``fail`` (the simulator): the failure plan, ``["NODE@ROUND",
        ...]``, giving the numbers an elastic MPI run with those losses computes.

    Returns
    -------
    Result
        ``summary``, ``records``, the averaged final model ``x`` and ``k``.

    Raises
    ------
    UsageError
        One line, before anything runs or is written (under MPI on every rank alike), for
        any argument the command line would refuse, with its message (the setting spelt
        as here: ``momentum must be in [0, 1), got 1.0``): a wrong type
        (``momentum='0.9'``, ``seed='abc'``, ``k=2.0``, ``nodes=True``, ``lr=None``), a
        value out of range, a step-size function that fails or gives no number > 0 at
        round 0, ``keep_checkpoints < 1``, ``out=''``; a ``resume`` checkpoint whose
        recorded settings differ from these (problem, nodes, k, seed, lr, momentum,
        topology: the message names each difference), that is damaged (every file is
        checked first) or lies beyond ``rounds``; an ``out`` or ``checkpoint_dir`` that
        holds another run's checkpoints (resume it instead) or a file named like one, or
        that another job holds.
    TypeError
        ``problem`` is not a Problem (the message names what is missing).
    OutputError
        An output or checkpoint file could not be written (a full disk): one line naming
        the file; the files written before, the previous checkpoint included, stay intact.
    NonFiniteError
        The metric became NaN or infinite (every rank together; at round 0 it names the
        data or the initial model, not the step size).

    The problem's contract (``initial()``, ``gradient()``, ``evaluate()``, a step-size
    function) is checked at start and raises ``UsageError`` naming the method (every
    rank together under MPI, as do ranks with another ``initial()``). Under MPI an
    exception on a single rank during the rounds ends the job with ``MPI_Abort`` after
    printing that rank's message (module docstring).

    Checkpoints written here resume through the command line (``python -m
    mpi_teleport.sim --resume DIR``) when the problem is the package's quadratic built
    with ``seed``, ``lr`` a number and ``topology`` a name; otherwise the command line
    refuses them in one line and they resume here, with ``resume=DIR``.

    Examples
    --------
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> result = mt.teleportation(Quadratic(n=16, d=5, sigma2=1.0, zeta2=1.0), nodes=16,
    ...                           k=4, rounds=200, lr=0.05)
    >>> result.summary["k"], len(result.x)
    (4, 5)
    """
    rounds = rounds_for(problem, rounds, epochs, k)
    spec = RunSpec("teleportation", nodes, k, rounds, lr, momentum, topology, variant, seed)
    return _api_run(problem, spec, locals())


def dsgd(problem, *, nodes: int, rounds: int | None = None,
         lr: float | Callable[[int], float], epochs: float | None = None,
         topology: str | Callable = "ring", momentum: float = 0.0, nesterov: bool = False,
         seed: int = 0, comm=None,
         log_every: int = 10, target: float | None = None, stop_at_target: bool = False,
         out: str | Path | None = None, checkpoint_every: int = 0,
         checkpoint_dir: str | Path | None = None, keep_checkpoints: int = 2,
         resume: str | Path | None = None, latency: str = "none", clock: str = "real",
         compute_time: float | None = None, progress: bool = False,
         callback: Callable[[dict], object] | None = None,
         elastic: bool = False, fail=None) -> engine.Result:
    """Train with Decentralized SGD: every node active every round, node m always holds
    replica m, gossip over ``topology`` among all n nodes.

    Parameters are those of :func:`teleportation` (without ``k`` and ``variant``), and so
    are the errors it raises for bad input, a resume that does not match and a full disk.

    Examples
    --------
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> mt.dsgd(Quadratic(n=8, d=3), nodes=8, rounds=50, lr=0.05).k
    8
    """
    rounds = rounds_for(problem, rounds, epochs, nodes)
    spec = RunSpec("dsgd", nodes, nodes, rounds, lr, momentum, topology, "overlap", seed)
    return _api_run(problem, spec, locals())


def search_k(problem, *, nodes: int, rounds: int | None = None,
             lr: float | Callable[[int], float], epochs: float | None = None,
             topology: str | Callable = "ring", momentum: float = 0.0,
             nesterov: bool = False, variant: str = "overlap", seed: int = 0, comm=None,
             log_every: int = 10,
             target: float | None = None, out: str | Path | None = None,
             latency: str = "none", clock: str = "real", compute_time: float | None = None,
             progress: bool = False, select: str = "averaged",
             callback: Callable[[dict], object] | None = None) -> engine.Result:
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

    Parameters are otherwise those of :func:`teleportation` (Algorithm 2 takes no
    checkpoints); bad input is a :class:`UsageError` as there.

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

    rounds = rounds_for(problem, rounds, epochs, nodes)
    spec = RunSpec("search", nodes, None, rounds, within_phase(lr, rounds), momentum, topology,
                   variant, seed, check_select(select))
    return _api_run(problem, spec, locals())


# ------------------------------------------------------------------------------ shared
@dataclass(frozen=True)
class _Files:
    """Where one API run writes and what it resumes (absolute paths, checked)."""

    out: Path | None
    checkpoint_dir: Path | None  # given, or out/checkpoints
    every: int
    keep: int
    resume: Path | None
    progress: bool

    @property
    def touches_checkpoints(self) -> bool:
        """The run may write a checkpoint (periodic, or on a signal) or resumes one."""
        return self.checkpoint_dir is not None or self.resume is not None

    @property
    def held(self) -> list:
        """The directories the run locks: out, and the checkpoint directory it writes."""
        return [(path, what) for path, what in ((self.out, "out"),
                                                (self.checkpoint_dir, "checkpoint_dir"))
                if path is not None and (what == "out" or self.every)]


def _api_run(problem, spec: RunSpec, args: dict) -> engine.Result:
    """Check every argument (:mod:`mpi_teleport.settings`, the command line's rules), check
    the inputs on disk on every process (a resumed checkpoint against these settings and
    file by file, the checkpoint directory free of another run's), then train; a refusal
    is one UsageError on every process, before anything is written."""
    problem = with_defaults(problem)  # (TypeError naming what is missing)
    spec, logging, latency, files = _checked(spec, args)
    given = getattr(problem, "nodes", None)
    if isinstance(given, int) and not isinstance(given, bool) and given != spec.nodes:
        raise UsageError(f"the problem was built for nodes={given} but the run has "
                         f"nodes={spec.nodes}: give both the same number")
    record = resume_rules.plain({**_record(spec, logging, latency, files),
                                 **resume_rules.describe_problem(problem, spec.seed,
                                                                 files.touches_checkpoints)})
    plan = CheckpointPlan(files.checkpoint_dir, files.every, files.keep)
    failures = parse_failures(args.get("fail"), spec.nodes)
    refused = None
    try:
        _check_disk(spec, latency, record, plan, files)
    except UsageError as exc:
        refused = str(exc)
    except OSError as exc:  # an unreadable directory or file
        refused = f"cannot read the checkpoint or output directory: {exc.strerror or exc}"
    return runner.train(problem, spec, logging, latency, comm=args.get("comm"), out=files.out,
                        plan=plan, settings=record, progress=files.progress,
                        config_record={**record, **problem.describe()}, hold=files.held,
                        refused=refused, callback=args.get("callback"),
                        elastic=bool(args.get("elastic")) or bool(failures), failures=failures)


def _checked(spec: RunSpec, args: dict) -> tuple[RunSpec, Logging, LatencySettings, _Files]:
    """The run's settings with every value checked by the rules the command line uses,
    or UsageError (one line)."""
    comm = args.get("comm")
    if comm is not None:  # (before any MPI call could hang on it)
        collective.check_communicator(comm)
    else:
        collective.warn_if_in_mpi_job()  # every process of an mpirun job simulating alone?
    values = check_values({
        "nodes": spec.nodes, "rounds": spec.rounds, "lr": spec.lr, "momentum": spec.momentum,
        "topology": spec.topology, "variant": spec.variant, "seed": spec.seed,
        "log_every": args.get("log_every", 10), "target": args.get("target"),
        "stop_at_target": args.get("stop_at_target", False),
        "latency": args.get("latency", "none"), "clock": args.get("clock", "real"),
        "compute_time": args.get("compute_time"), "out": args.get("out"),
        "checkpoint_every": args.get("checkpoint_every", 0),
        "checkpoint_dir": args.get("checkpoint_dir"),
        "keep_checkpoints": args.get("keep_checkpoints", 2), "resume": args.get("resume"),
    }, API)
    progress = flag(args.get("progress", False), "progress", API)
    k = spec.k
    if spec.algorithm == "teleportation":
        k = check_k(spec.k, values["nodes"], spec.algorithm, API)
    elif spec.algorithm == "dsgd":
        k = values["nodes"]
    check_checkpoints(values, API, search=spec.algorithm == "search")
    spec = RunSpec(spec.algorithm, values["nodes"], k, values["rounds"], values["lr"],
                   momentum_of(values["momentum"], args.get("nesterov", False)),
                   values["topology"], values["variant"], values["seed"], spec.k_select)
    logging = Logging(values["log_every"], values["target"], values["stop_at_target"])
    latency = LatencySettings(values["latency"], values["clock"], values["compute_time"])

    def where(name):
        return None if values[name] is None else Path(absolute(name, values[name], API))

    out, ck_dir = where("out"), where("checkpoint_dir")
    if ck_dir is None and out is not None:
        ck_dir = out / "checkpoints"
    files = _Files(out, ck_dir, values["checkpoint_every"], values["keep_checkpoints"],
                   where("resume"), progress)
    return spec, logging, latency, files


def _record(spec: RunSpec, logging: Logging, latency: LatencySettings, files: _Files) -> dict:
    """The settings a checkpoint manifest keeps (named as the command line's Config
    names them, so ``--resume`` reads them) and a resume compares."""
    record = {"algorithm": spec.algorithm, "nodes": spec.nodes, "k": spec.tokens,
              "rounds": spec.rounds, "lr": resume_rules.describe_lr(spec.lr),
              "lr_schedule": "function" if callable(spec.lr) else "constant",
              "momentum": float(spec.momentum), "topology": topo.describe(spec.topology),
              "variant": spec.variant, "seed": spec.seed, "log_every": logging.every,
              "target": logging.target, "stop_at_target": logging.stop_at_target,
              "latency": latency.spec, "clock": latency.clock,
              "compute_time": latency.compute_time, "checkpoint_every": files.every,
              "keep_checkpoints": files.keep,
              "out": None if files.out is None else str(files.out),
              "checkpoint_dir": None if files.checkpoint_dir is None else str(files.checkpoint_dir)}
    if spec.algorithm == "search":
        record["k_select"] = spec.k_select
    if isinstance(spec.momentum, Nesterov):  # (only then: other runs' records unchanged)
        record["nesterov"] = True
    return record


def _check_disk(spec: RunSpec, latency: LatencySettings, record: dict, plan: CheckpointPlan,
                files: _Files) -> None:
    """The API's preflight, on every process: outputs writable, a latency matrix file
    readable, the checkpoint resumed matching this run and intact, the checkpoint
    directory free of another run's checkpoints. Fills ``plan.source``/``manifest``."""
    if files.out is not None:
        check_writable("out", files.out)
    if files.checkpoint_dir is not None and files.every:
        check_writable("checkpoint_dir", files.checkpoint_dir)
    try:
        parse_spec(latency.spec, spec.nodes)  # reads and checks a matrix file
    except UsageError as exc:
        raise API.retell(exc) from None
    if spec.algorithm == "search":
        return  # (no checkpoints: Algorithm 2 is short)
    if files.resume is not None:
        given = f"resume={str(files.resume)!r}"
        found = locate(files.resume, spec.algorithm)
        if found is None:
            other = any_checkpoint(files.resume)
            what = f" (it holds a {other[1].get('algorithm')} run)" if other else ""
            raise UsageError(f"{given}: no complete checkpoint of a {spec.algorithm} run "
                             f"there{what}")
        plan.source = resume_rules.check_source(given, found[0], found[1], nodes=spec.nodes,
                                                k=spec.tokens, rounds=spec.rounds,
                                                current=record, naming=API)
        plan.manifest = found[1]
    if files.checkpoint_dir is not None:
        hint = f"resume={str(files.out or files.checkpoint_dir)!r}"
        resume_rules.check_target(files.checkpoint_dir, plan.source, hint, API)
