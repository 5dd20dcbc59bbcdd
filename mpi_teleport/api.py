"""The public Python API: Teleportation, Decentralized SGD and Algorithm 2 on any problem.

Each function runs in this process when ``comm`` is None (the simulator: every node
here) or with one node per MPI rank when ``comm`` is an mpi4py communicator (the
package works on a duplicate of it, freed at the end). The same call gives the same
records, bit for bit, either way.

What a call does when something is wrong (details: ``mpi_teleport/DESIGN.md`` section 9.1,
the manual's page ``docs/howto/failures.md``):

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
  (:class:`~mpi_teleport.runtime.collective.MpiJobWarning`).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .runtime import engine
from .front.api_checks import checked
from .front.prepare import RunSettings, prepare
from .front.runner import RunContext, train
from .runtime.launched import resolve_comm
from .front.loop_options import eval_rounds, optimizer_settings, rounds_for, within_phase
from .front.settings import (Checkpoints, Latency, Records, keyword_default, merge,
                             merge_latency)
from .core.schedulers import Scheduler, step_size
from .core.topology import Topology

if TYPE_CHECKING:
    _T = TypeVar("_T")

    def Default(value: _T) -> _T:
        """For the type checker, a keyword's Default(...) reads as its value (at run time
        it is settings.Default, the sentinel: see mpi_teleport/front/settings.py)."""

    def unset(name: str) -> Any:
        """For the type checker, a keyword's default from the table reads as any value (at
        run time settings.unset: the row's default as a Default)."""
else:
    from .front.settings import Default, unset
# The keywords' defaults are the settings table's (front/settings.py: keyword_default, the
# row's one default, or the Python keyword's where it differs); unset(name): the same, told
# apart from that value given (the keywords an option object can also set: merge).

__all__ = ["teleportation", "dsgd", "search_k", "train", "RunSettings"]


def teleportation(problem: Any, *, nodes: int, k: int, rounds: int | None = None,
                  lr: float | Callable[[int], float] | Scheduler | None = None,
                  epochs: float | None = keyword_default("epochs"), lr_step: str = "epoch",
                  optimizer: Any = None,
                  topology: Topology = keyword_default("topology"),
                  momentum: float = keyword_default("momentum"),
                  nesterov: bool = keyword_default("nesterov"),
                  variant: str = keyword_default("variant"),
                  seed: int = keyword_default("seed"), comm: Any = None,
                  out: str | Path | None = keyword_default("out"),
                  records: Records | None = None,
                  log_every: int = unset("log_every"),
                  target: float | None = unset("target"),
                  stop_at_target: bool = unset("stop_at_target"),
                  progress: bool = unset("progress"),
                  callback: Callable[[dict[str, Any]], object] | None = Default(None),
                  eval_every: int | None = unset("eval_every"),
                  eval_every_epochs: float | None = None,
                  log_every_epochs: int | None = unset("log_every_epochs"),
                  eval_at_start: bool = unset("eval_at_start"),
                  trace: str | Path | None = unset("trace"),
                  checkpoints: Checkpoints | None = None,
                  checkpoint_every: int = unset("checkpoint_every"),
                  checkpoint_dir: str | Path | None = unset("checkpoint_dir"),
                  keep_checkpoints: int = unset("keep_checkpoints"),
                  resume: str | Path | None = unset("resume"),
                  latency: str | Latency = unset("latency"),
                  clock: str = unset("clock"),
                  compute_time: float | None = unset("compute_time"),
                  elastic: bool = keyword_default("elastic"),
                  fail: str | Sequence[str | tuple[int, int]] | None = keyword_default(
                      "fail"),
                  spares: int = keyword_default("spares")) -> engine.Result:
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
    lr : float, callable or torch scheduler
        Step size, a function of the round t (in :func:`search_k`, of the round within
        its phase: both phases start at t = 0), or a ``torch.optim.lr_scheduler``
        scheduler as a plain script builds it on its optimizer (``StepLR``,
        ``CosineAnnealingLR``, ``OneCycleLR``, ``SequentialLR`` of a ``LinearLR`` warm-up
        and a cosine, ...), before any ``step()``: the step size of round t is its
        learning rate after as many ``step()`` calls as ``lr_step`` counts (a private
        copy is replayed: a pure function of the round, the same on every rank and
        after a resume; :mod:`mpi_teleport.core.schedulers`); or the scheduler unbuilt,
        built on a copy of ``optimizer=``: ``functools.partial(StepLR, step_size=1,
        gamma=0.7)`` or ``lambda optimizer: StepLR(optimizer, 1, 0.7)``.
    lr_step : {'epoch', 'round'}
        With a scheduler: ``'epoch'`` (default) steps it once per pass over the training
        data (epoch e = floor(t * batch_size * active / n_train), active = k, or n for
        DSGD; :func:`mpi_teleport.rounds_per_epoch`), as a plain script steps it after
        each epoch; ``'round'`` once per round, as a script stepping per batch.
    topology : str or callable
        ``ring``, ``torus``, ``exp``, ``onepeer-exp``, ``base2``, ``complete``, or a
        function ``(k, t) -> W`` returning a k x k doubly stochastic matrix.
    optimizer : torch optimizer class, factory or instance, optional
        As a PyTorch script gives it: ``torch.optim.AdamW`` (the class),
        ``functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.05)`` (a factory
        with its keywords) or ``torch.optim.AdamW(model.parameters(), lr=1e-3)`` (the
        instance a scheduler was built on); any ``torch.optim.Optimizer``, third-party
        subclasses included. Its hyperparameters are read once; ``lr`` defaults to its
        ``lr``. Its per-parameter state (Adam's moments, Adadelta's averages, ...)
        travels with the token exactly as momentum does, stays with its replica in DSGD
        and is checkpointed; SGD's ``momentum`` and ``nesterov`` become those keywords
        (its ``weight_decay`` torch's L2 term). What a token cannot carry (a closure:
        LBFGS; state not per parameter) is refused in one line
        (:mod:`mpi_teleport.core.optimizers`, mpi_teleport/DESIGN.md §2.6).
    momentum : float
        Heavy-ball momentum in [0, 1); it travels with its token.
    nesterov : bool
        Take the momentum in Nesterov's form, as ``torch.optim.SGD(nesterov=True)``:
        v = mu v + g, x -= lr (g + mu v). Needs ``momentum > 0``.
    variant : {'overlap', 'simple'}
        Algorithm 3 (one communication phase per round) or Algorithm 1.
    seed : int
        Keys every random number: same seed, same numbers, on any back end.
    comm : mpi4py communicator, None or "auto"
        None: the simulator, all n nodes in this process. A communicator: one node per
        rank. ``"auto"``: ``MPI.COMM_WORLD`` when an MPI launcher started this process
        with more than one rank (``python -m mpi_teleport.launch -n 4 script.py``), else
        the simulator, so one script runs both ways unchanged
        (:mod:`mpi_teleport.runtime.launched`; pair it with the problem's
        ``local_nodes="auto"`` and :func:`mpi_teleport.on_root`).
    out : path or None
        Directory for config.json, metrics.jsonl and summary.json (root only).
    records : Records, optional
        What is recorded and when, grouped: ``Records(every=10, target=None,
        stop_at_target=False, progress=False, callback=None)``, the same as the flat
        keywords ``log_every``, ``target``, ``stop_at_target``, ``progress``,
        ``callback`` (give a setting one way or the other: both is a UsageError).
    log_every : int
        Record every this many rounds (and the first and last). Every record after
        round 0 carries ``train_loss`` (and ``train_accuracy`` for classification): the
        mean over the previous round's active nodes of their mini-batch values, from the
        forward passes the gradients made (a problem with ``training_metrics``, e.g. a
        TorchProblem; no extra pass). Such a problem's run also records round 1, the
        first batches' loss (as a plain loop prints batch 0's), evaluated as round 0 is:
        with every record evaluating (the default) it has ``loss`` like every other;
        with ``eval_every`` or ``eval_at_start=False`` it carries the training values
        alone (not for ``search_k`` or elastic runs, whose records have none).
    eval_every : int, optional
        Evaluate the model (test metrics, target, non-finite check) only every this many
        rounds, and at the first and last; the records between carry the training
        values alone. Default: every record evaluates.
    eval_every_epochs : float, optional
        Evaluate at the end of every this many passes over the training data: a whole
        number E evaluates exactly at the round that completes every E-th epoch (where
        the active nodes' samples reach a multiple of ``n_train``), as a plain loop's
        ``test()`` after each epoch; a fraction is converted to rounds as ``epochs`` is.
    log_every_epochs : int, optional
        Also record at the end of every this many epochs (the round that completes it),
        beside ``log_every``. Every record of a problem that knows its epochs says where
        it stands as a plain loop counts: ``train_epoch`` (from 1), ``epoch_step`` (the
        round's step within that epoch, from 1) and ``epoch_end`` (True at the round
        completing it), so a callback tells an epoch's end without arithmetic.
    eval_at_start : bool
        Evaluate the model before the first round (round 0's record; default True).
        False skips that evaluation (a large test set at the start of a long run): the
        record then carries no metric (nor does round 1's, see ``log_every``), and the
        last round is always evaluated, so ``final_<metric>`` is the trained model's.
    trace : str or Path, optional
        Write a timeline of every rank's rounds there: a Chrome trace-event file (one
        process per rank; Perfetto, chrome://tracing), at every checkpoint and at the end;
        ``python -m mpi_teleport.trace PATH`` says where the time went (the manual's "A
        run's timeline"). A path that cannot be written is refused before the first round.
    target, stop_at_target
        ``rounds_to_target`` is the first logged round whose metric reaches ``target``;
        with ``stop_at_target`` the run ends there.
    progress : bool
        A progress bar on stderr (root).
    callback : callable, optional
        ``callback(record)``, called on the root with a copy of each record (the dict
        written to metrics.jsonl) after each logged round; a true return value stops the
        run there (custom early stopping). Ready ones: :class:`mpi_teleport.CsvWriter`,
        :class:`mpi_teleport.TensorBoardWriter` (:mod:`mpi_teleport.disk.loggers`).
    elastic, fail
        Elastic mode (mpi_teleport/DESIGN.md §11): under MPI (``comm`` of an Open MPI
        job started with ``mpirun --with-ft ulfm``) the run goes on with the survivors
        when ranks die; ``fail`` (the simulator): the failure plan, ``["NODE@ROUND",
        ...]``, giving the numbers an elastic MPI run with those losses computes.
    spares : int
        Hot spares (simulator, with ``fail``): the lowest waiting spare takes over a dead
        node (ids ``nodes`` .. ``nodes + spares - 1`` in ``fail`` name the spares); under
        MPI spare ranks are the command line's (``python -m mpi_teleport.run --spares``).
    checkpoints : Checkpoints, optional
        Checkpoints grouped: ``Checkpoints(every=0, dir=None, keep=2, resume=None)``, the
        same as ``checkpoint_every``, ``checkpoint_dir``, ``keep_checkpoints``, ``resume``.
    checkpoint_every, checkpoint_dir, keep_checkpoints, resume
        Periodic checkpoints (default directory ``out/checkpoints``) and resuming from a
        run, checkpoint or round-* directory; a resumed run's records equal an
        uninterrupted run's.
    latency, clock, compute_time
        The latency layer (``none``, ``const:US``, ``mod:TAU``, ``matrix:FILE.csv``,
        optionally ``,bw:GBPS``), ``real`` or ``virtual`` clock, and the modelled compute
        time per step in microseconds. Records then carry ``virtual_time_s``. Grouped:
        ``latency=Latency(model="none", clock="real", compute_time=None)``.

    Notes
    -----
    The option objects (:mod:`mpi_teleport.front.settings`) are checked by the same rules as the
    flat keywords, with the same messages, which name the flat keyword
    (``Records(every=0)``: ``log_every must be at least 1, got 0``).

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
        round 0, ``keep_checkpoints < 1``, ``out=''``, a setting given both as a flat
        keyword and in an option object; a ``resume`` checkpoint whose
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

    Notes
    -----
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
    comm = resolve_comm(comm)  # ("auto": MPI under a launcher, else the simulator)
    rounds = rounds_for(problem, rounds, epochs, k)
    lr, momentum, nesterov, rule = optimizer_settings(optimizer, problem, lr, momentum, nesterov)
    lr = step_size(lr, lr_step, problem, k, optimizer)
    run = {"algorithm": "teleportation", "nodes": nodes, "k": k, "rounds": rounds, "lr": lr,
           "momentum": momentum, "nesterov": nesterov, "topology": topology,
           "variant": variant, "seed": seed}
    eval_every, in_epochs = eval_rounds(problem, eval_every, eval_every_epochs, k)
    return _run(
        problem, run, rule=rule, comm=comm, out=out,
        records=merge(Records, records, log_every=log_every, target=target,
                      stop_at_target=stop_at_target, progress=progress,
                      callback=callback, eval_every=eval_every,
                      eval_at_start=eval_at_start, trace=trace,
                      log_every_epochs=log_every_epochs, eval_every_epochs=in_epochs),
        checkpoints=merge(Checkpoints, checkpoints,
                          checkpoint_every=checkpoint_every,
                          checkpoint_dir=checkpoint_dir,
                          keep_checkpoints=keep_checkpoints, resume=resume),
        latency=merge_latency(latency, clock, compute_time),
        elastic=elastic, fail=fail, spares=spares)


def dsgd(problem: Any, *, nodes: int, rounds: int | None = None,
         lr: float | Callable[[int], float] | Scheduler | None = None,
         epochs: float | None = keyword_default("epochs"), lr_step: str = "epoch",
         optimizer: Any = None,
         topology: Topology = keyword_default("topology"),
         momentum: float = keyword_default("momentum"),
         nesterov: bool = keyword_default("nesterov"),
         seed: int = keyword_default("seed"), comm: Any = None,
         out: str | Path | None = keyword_default("out"),
         records: Records | None = None,
         log_every: int = unset("log_every"),
         target: float | None = unset("target"),
         stop_at_target: bool = unset("stop_at_target"),
         progress: bool = unset("progress"),
         callback: Callable[[dict[str, Any]], object] | None = Default(None),
         eval_every: int | None = unset("eval_every"),
         eval_every_epochs: float | None = None,
         log_every_epochs: int | None = unset("log_every_epochs"),
         eval_at_start: bool = unset("eval_at_start"),
         trace: str | Path | None = unset("trace"),
         checkpoints: Checkpoints | None = None,
         checkpoint_every: int = unset("checkpoint_every"),
         checkpoint_dir: str | Path | None = unset("checkpoint_dir"),
         keep_checkpoints: int = unset("keep_checkpoints"),
         resume: str | Path | None = unset("resume"),
         latency: str | Latency = unset("latency"),
         clock: str = unset("clock"),
         compute_time: float | None = unset("compute_time"),
         elastic: bool = keyword_default("elastic"),
         fail: str | Sequence[str | tuple[int, int]] | None = keyword_default("fail"),
         spares: int = keyword_default("spares")) -> engine.Result:
    """Train with Decentralized SGD: every node active every round, node m always holds
    replica m, gossip over ``topology`` among all n nodes.

    Parameters are those of :func:`teleportation` (without ``k`` and ``variant``; the
    option objects ``records=``, ``checkpoints=``, ``latency=`` too), and so
    are the errors it raises for bad input, a resume that does not match and a full disk.

    Examples
    --------
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> mt.dsgd(Quadratic(n=8, d=3), nodes=8, rounds=50, lr=0.05).k
    8
    """
    comm = resolve_comm(comm)  # ("auto": MPI under a launcher, else the simulator)
    rounds = rounds_for(problem, rounds, epochs, nodes)
    lr, momentum, nesterov, rule = optimizer_settings(optimizer, problem, lr, momentum, nesterov)
    lr = step_size(lr, lr_step, problem, nodes, optimizer)
    run = {"algorithm": "dsgd", "nodes": nodes, "k": nodes, "rounds": rounds, "lr": lr,
           "momentum": momentum, "nesterov": nesterov, "topology": topology,
           "variant": "overlap", "seed": seed}
    eval_every, in_epochs = eval_rounds(problem, eval_every, eval_every_epochs, nodes)
    return _run(
        problem, run, rule=rule, comm=comm, out=out,
        records=merge(Records, records, log_every=log_every, target=target,
                      stop_at_target=stop_at_target, progress=progress,
                      callback=callback, eval_every=eval_every,
                      eval_at_start=eval_at_start, trace=trace,
                      log_every_epochs=log_every_epochs, eval_every_epochs=in_epochs),
        checkpoints=merge(Checkpoints, checkpoints,
                          checkpoint_every=checkpoint_every,
                          checkpoint_dir=checkpoint_dir,
                          keep_checkpoints=keep_checkpoints, resume=resume),
        latency=merge_latency(latency, clock, compute_time),
        elastic=elastic, fail=fail, spares=spares)


def search_k(problem: Any, *, nodes: int, rounds: int | None = None,
             lr: float | Callable[[int], float] | Scheduler,
             epochs: float | None = keyword_default("epochs"),
             lr_step: str = "epoch",
             topology: Topology = keyword_default("topology"),
             momentum: float = keyword_default("momentum"),
             nesterov: bool = keyword_default("nesterov"),
             variant: str = keyword_default("variant"),
             seed: int = keyword_default("seed"), comm: Any = None,
             out: str | Path | None = keyword_default("out"),
             select: str = keyword_default("k_select"),
             records: Records | None = None,
             log_every: int = unset("log_every"),
             target: float | None = unset("target"),
             progress: bool = unset("progress"),
             callback: Callable[[dict[str, Any]], object] | None = Default(None),
             latency: str | Latency = unset("latency"),
             clock: str = unset("clock"),
             compute_time: float | None = unset("compute_time"),
             trace: str | Path | None = unset("trace")) -> engine.Result:
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
    records : Records, optional
        As in :func:`teleportation`, without ``stop_at_target`` (setting it is a
        UsageError); ``latency`` likewise takes a :class:`Latency`.
    select : {'averaged', 'tokens', 'time-average'}
        Which number decides, since the paper leaves "best" open (the command line's
        ``--k-select``): ``'averaged'`` (default) the averaged model's validation metric at
        the candidate's last round; ``'tokens'`` the mean over the candidate's tokens of
        each token's own validation metric (``validate`` of a one-row matrix; for the
        synthetic problem the mean of ``||x_m - x*||^2``, what ``target`` measures);
        ``'time-average'`` the averaged model's validation metric averaged over the
        logged rounds of the candidate's phase after its first step (every round with
        ``log_every=1``; the nearest to the paper's theory criterion, a time-averaged
        gradient norm).

    Notes
    -----
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
    from .runtime.search import check_select

    comm = resolve_comm(comm)  # ("auto": MPI under a launcher, else the simulator)
    rounds = rounds_for(problem, rounds, epochs, nodes)
    lr = step_size(lr, lr_step, problem, nodes)
    run = {"algorithm": "search", "nodes": nodes, "k": None, "rounds": rounds,
           "lr": within_phase(lr, rounds), "momentum": momentum, "nesterov": nesterov,
           "topology": topology, "variant": variant, "seed": seed,
           "k_select": check_select(select)}
    return _run(
        problem, run, comm=comm, out=out,
        records=merge(Records, records, log_every=log_every, target=target,
                      progress=progress, callback=callback, trace=trace),
        checkpoints=Checkpoints(),
        latency=merge_latency(latency, clock, compute_time))


def _run(problem: Any, run: dict[str, Any], *, rule: Any = None, comm: Any, out: Any,
         records: Records, checkpoints: Checkpoints, latency: Latency,
         elastic: bool = False, fail: Any = None, spares: int = 0) -> engine.Result:
    """The keywords' one path, the command lines' too: their checked values and disk
    (:func:`mpi_teleport.front.api_checks.checked`), the run's RunSettings
    (:func:`mpi_teleport.front.prepare.prepare`), then :func:`train`, which refuses on
    every process what the disk check refused on one."""
    values, prepared, refused, identity = checked(
        problem, run, rule=rule, comm=comm, out=out, records=records,
        checkpoints=checkpoints, latency=latency, elastic=elastic, fail=fail, spares=spares)
    settings = prepare(problem, values, comm, prepared=prepared, callback=records.callback,
                       identity=identity)
    return train(problem, settings, comm, RunContext(refused=refused))
