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

from typing import TYPE_CHECKING, Any

from .runtime import engine
from .session.keywords import signature
from .session.prepare import RunSettings, agreed_settings_from_keywords
from .session.runner import train

if TYPE_CHECKING:  # (typing.Unpack for **keywords is Python 3.12's; type checkers know both)
    from collections.abc import Callable

    from typing_extensions import Unpack

    from .core.schedulers import Scheduler
    from .session.keywords import SearchKeywords, TeleportationKeywords, TrainingKeywords
# The keywords are written once, in session/keywords.py: their types (the bundles an IDE reads
# through Unpack), their defaults (most of them the settings table's) and the signature
# help() shows (session.keywords.signature).

__all__ = ["teleportation", "dsgd", "search_k", "train", "RunSettings"]


@signature
def teleportation(problem: Any, *, nodes: int, k: int,
                  **keywords: Unpack[TeleportationKeywords]) -> engine.Result:
    """Train with Teleportation (Takezawa & Stich, ICLR 2025): k of n nodes active a round.

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> result = mt.teleportation(Quadratic(n=16, d=5, sigma2=1.0, zeta2=1.0), nodes=16,
    ...                           k=4, rounds=200, lr=0.05)
    >>> result.summary["k"], len(result.x)
    (4, 5)

    In each round only k of the n nodes are active: they take the models (tokens) of the
    previous round's active nodes, take an SGD step on their own data and gossip over
    ``topology`` among themselves (the manual's Concepts). Each keyword is a setting of
    the command line too; the manual's "The training functions' keywords" says the rest
    of each.

    Parameters
    ----------
    problem : Problem
        The training problem (a :class:`mpi_teleport.Problem`, e.g. a
        :class:`mpi_teleport.TorchProblem`); under MPI each rank passes its own instance.
    nodes : int
        n, the number of nodes (under MPI: the communicator's size).
    k : int
        Active nodes (tokens) per round, 1 <= k <= n.
    rounds : int
        T, rounds to run; or give ``epochs`` (passes over a TorchProblem's data).
    lr : float, callable or torch scheduler
        The step size, a function of the round, or a ``torch.optim.lr_scheduler``
        scheduler (stepped per ``lr_step``: ``'epoch'`` or ``'round'``).
    optimizer : torch optimizer class, factory or instance, optional
        As a PyTorch script gives it; its per-parameter state travels with the token.
    topology : str or callable
        ``ring`` (default), ``torus``, ``exp``, ``onepeer-exp``, ``base2``, ``complete``, or
        a function ``(k, t) -> W``.
    momentum, nesterov : float, bool
        Heavy-ball momentum in [0, 1) (Nesterov's form with ``nesterov=True``).
    variant : {'overlap', 'simple'}
        Algorithm 3 (default) or Algorithm 1: the same numbers.
    seed : int
        Keys every random number: same seed, same numbers, on any back end.
    comm : mpi4py communicator, None or "auto"
        None: the simulator (all nodes in this process); a communicator: one node per
        rank; ``"auto"``: ``MPI.COMM_WORLD`` under a launcher, else the simulator.
    out : path, optional
        Directory for ``config.json``, ``metrics.jsonl`` and ``summary.json``.
    records : Records, optional
        What is recorded and when, or the flat keywords ``log_every``, ``target``,
        ``stop_at_target``, ``progress``, ``callback``, ``eval_every``,
        ``eval_every_epochs``, ``log_every_epochs``, ``eval_at_start``, ``trace``.
    checkpoints : Checkpoints, optional
        Periodic checkpoints and resuming, or ``checkpoint_every``, ``checkpoint_dir``,
        ``keep_checkpoints``, ``resume``.
    latency : str or Latency, optional
        The latency layer, with ``clock`` and ``compute_time``.
    elastic, fail, spares
        Survive lost ranks (MPI with ULFM); the simulator's failure plan
        (``["NODE@ROUND", ...]``); hot spares.

    Returns
    -------
    Result
        ``summary``, ``records``, the averaged final model ``x`` and ``k``.

    Raises
    ------
    UsageError
        Bad input, in one line, before anything runs (under MPI on every rank alike).
    OutputError
        An output or checkpoint file could not be written.
    NonFiniteError
        The metric became NaN or infinite.

    Examples
    --------
    Grouped options and a record every 50 rounds:

    >>> result = mt.teleportation(Quadratic(n=8, d=3), nodes=8, k=2, rounds=100, lr=0.1,
    ...                           records=mt.Records(log_every=50))
    >>> [r["round"] for r in result.records]
    [0, 50, 100]
    """
    return _run("teleportation", problem, {**keywords, "nodes": nodes, "k": k})


@signature
def dsgd(problem: Any, *, nodes: int,
         **keywords: Unpack[TrainingKeywords]) -> engine.Result:
    """Train with Decentralized SGD: every node active every round, gossip among all n.

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> mt.dsgd(Quadratic(n=8, d=3), nodes=8, rounds=50, lr=0.05).k
    8

    Node m always holds replica m and gossips over ``topology`` with its neighbours.
    Parameters are those of :func:`teleportation` without ``k`` and ``variant`` (the
    option objects ``records=``, ``checkpoints=``, ``latency=`` too), and so are the
    errors it raises for bad input, a resume that does not match and a full disk.

    Examples
    --------
    The Base-2 Graph instead of the ring:

    >>> mt.dsgd(Quadratic(n=8, d=3), nodes=8, rounds=50, lr=0.05, topology="base2").summary["topology"]
    'base2'
    """
    return _run("dsgd", problem, {**keywords, "nodes": nodes})


@signature
def search_k(problem: Any, *, nodes: int, lr: float | Callable[[int], float] | Scheduler,
             **keywords: Unpack[SearchKeywords]) -> engine.Result:
    """Algorithm 2: choose k with 2T rounds instead of n T.

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> result = mt.search_k(Quadratic(n=7, d=4, sigma2=1.0), nodes=7, rounds=40, lr=0.05)
    >>> sorted(result.candidates, key=int)
    ['1', '2', '4', '7']

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
    The chosen k, then Teleportation with it:

    >>> final = mt.teleportation(Quadratic(n=7, d=4, sigma2=1.0), nodes=7, k=result.k,
    ...                          rounds=40, lr=0.05)
    >>> final.k == result.k
    True
    """
    return _run("search_k", problem, {**keywords, "nodes": nodes, "lr": lr})


def _run(function: str, problem: Any, keywords: dict[str, Any]) -> engine.Result:
    """The keywords' one path: the run's RunSettings as
    :meth:`RunSettings.from_keywords` makes them
    (:func:`mpi_teleport.session.prepare.agreed_settings_from_keywords`: every value
    checked by the command line's rules, the inputs on disk checked on this process, and
    under MPI a refusal on any process learnt by every process), then :func:`train`."""
    settings, comm = agreed_settings_from_keywords(function, problem, keywords)
    return train(problem, settings, comm)
