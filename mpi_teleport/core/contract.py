"""The :class:`~mpi_teleport.problem.Problem` contract, enforced: what ``initial()``,
``gradient()``, ``evaluate()`` and a step-size function must return, checked where it
costs nothing per round, with errors (:class:`UsageError`) that name the method, what it
returned and what it must return.

* At start (:func:`initial_model`, :func:`probe`): ``initial()`` is a finite ``(dim,)``
  array of the problem's dtype; ``gradient()`` at the initial model, for the nodes this
  process computes first, returns (or writes into ``out=``) a finite ``(rows, dim)``
  array of that dtype; the step size of the first rounds is a finite number >= 0. A
  non-finite gradient here is a problem of the data or of the initial model (the step
  size has not acted yet), and is said so.
* Every round (:func:`landed`, :func:`checked_lr`): ``gradient()``'s *return value* is
  what counts. A problem that returns a new array instead of writing ``out=`` has it
  copied into ``out`` (both back ends step on ``out``: the simulator and MPI then train
  alike; before, the MPI path ignored the returned array and its tokens stayed frozen).
  The check is one identity test when ``out`` was written; a step-size function's value
  is checked each round (one comparison on the Python call the round makes anyway).
* Every logging round (:func:`check_metrics`): ``evaluate()`` returns a dict holding the
  problem's ``metric`` as a number.

This module imports numpy alone (no MPI, no torch).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, SupportsInt

import numpy as np

from ..errors import UsageError

if TYPE_CHECKING:
    from .spec import RunSpec

# ``problem`` below: the user's object, checked here for the Problem protocol's members (Any).

__all__ = ["initial_model", "probe", "landed", "check_metrics", "checked_lr", "check_lr",
           "first_rounds_lr", "first_rounds_topology", "can_validate"]

INF = math.inf


def _what(value: object) -> str:
    """A returned value as a message shows it: type, shape and dtype of an array."""
    if value is None:
        return "None"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    return f"{type(value).__name__} {value!r}"[:120]


def _name(problem: object) -> str:
    return getattr(problem, "name", None) or type(problem).__name__


def initial_model(problem: Any) -> np.ndarray:
    """``problem.initial()``, checked: a finite numpy array of shape ``(dim,)`` and the
    problem's dtype (UsageError naming what to fix otherwise)."""
    x0 = problem.initial()
    want = f"a numpy array of shape ({problem.dim},) and dtype {problem.dtype}"
    if not isinstance(x0, np.ndarray):
        raise UsageError(f"{_name(problem)}.initial() returned {_what(x0)}; it must return {want}")
    if x0.shape != (problem.dim,):
        raise UsageError(f"{_name(problem)}.initial() returned {x0.size} values of shape "
                         f"{x0.shape} but dim = {problem.dim}: it must return {want}")
    if x0.dtype != problem.dtype:
        raise UsageError(f"{_name(problem)}.initial() returned dtype {x0.dtype} but the "
                         f"problem's dtype is {problem.dtype}: return "
                         f"np.asarray(x, dtype={problem.dtype}) or change dtype")
    if not np.isfinite(x0).all():
        bad = int(np.flatnonzero(~np.isfinite(x0))[0])
        raise UsageError(f"{_name(problem)}.initial() holds non-finite values (NaN or inf, "
                         f"first at index {bad}): the initial model must be finite")
    return x0


def can_validate(problem: Any) -> None:
    """Algorithm 2 selects k on ``validate``: a problem that says it cannot validate
    (``validation_unavailable``) is refused before the first round, in one line saying
    what to pass, rather than at the first logging round from inside the engine."""
    why = getattr(problem, "validation_unavailable", None)
    if why:
        raise UsageError(f"Algorithm 2 (k auto, search_k) chooses k by a validation metric, "
                         f"but {why}")


def probe(problem: Any, nodes: Iterable[SupportsInt], x0: np.ndarray, t: int = 0) -> None:
    """Call ``gradient(nodes, x0 rows, t)`` once and check what comes back (UsageError).

    A gradient is keyed by (seed, node, t) only (the Problem contract), so this call
    changes nothing the run computes afterwards."""
    nodes = [int(m) for m in nodes]
    x = np.tile(x0, (len(nodes), 1))
    out = np.empty_like(x)
    g = landed(problem, problem.gradient(nodes, x, t, out=out), out, x)
    finite = np.isfinite(g).all(axis=1)
    if not finite.all():
        node = nodes[int(np.flatnonzero(~finite)[0])]
        raise UsageError(f"{_name(problem)}.gradient() of node {node} is not finite (NaN or "
                         f"inf) at the initial model in round {t}: the data of node {node} "
                         f"or the problem's gradient holds NaN or inf (not a step-size "
                         f"problem: no step has been taken yet)")


def landed(problem: Any, g: object, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """What ``gradient()`` returned when it is not ``out`` itself: checked, and copied
    into ``out`` (when given), so the caller can always step on ``out``."""
    rows = x.shape[0] if getattr(x, "ndim", 0) == 2 else 1
    want = f"({rows}, {problem.dim})"
    if g is None:
        raise UsageError(f"{_name(problem)}.gradient() returned None: it must return the "
                         f"gradient rows, a numpy array of shape {want} and dtype "
                         f"{problem.dtype} (written into out= when given, or a new array)")
    if not isinstance(g, np.ndarray):
        raise UsageError(f"{_name(problem)}.gradient() returned {_what(g)}; it must return "
                         f"a numpy array of shape {want} and dtype {problem.dtype}")
    if g.shape != (rows, problem.dim):
        raise UsageError(f"{_name(problem)}.gradient() returned shape {g.shape} for "
                         f"{rows} row(s) of dim {problem.dim}: it must return shape {want}, "
                         f"one gradient row per row of x")
    if g.dtype != problem.dtype:
        raise UsageError(f"{_name(problem)}.gradient() returned dtype {g.dtype} but the "
                         f"problem's dtype is {problem.dtype}: return arrays of dtype "
                         f"{problem.dtype} (e.g. write into out=)")
    if out is None:
        return g
    np.copyto(out, g)
    return out


def check_metrics(problem: Any, metrics: object) -> None:
    """``evaluate()``'s result holds the problem's metric as a number (UsageError)."""
    metric = problem.metric
    if not isinstance(metrics, dict):
        raise UsageError(f"{_name(problem)}.evaluate() returned {_what(metrics)}; it must "
                         f"return a dict holding {metric!r} (e.g. {{{metric!r}: 0.5}})")
    if metric not in metrics:
        raise UsageError(f"{_name(problem)}.evaluate() returned a dict without the metric "
                         f"{metric!r} (keys: {', '.join(map(str, metrics)) or 'none'}): "
                         f"add it, or set the problem's metric to one of its keys")
    value = metrics[metric]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{_name(problem)}.evaluate()[{metric!r}] is {_what(value)}; it "
                         f"must be a number (e.g. float(value))")


def check_lr(value: object, t: int) -> float:
    """The step size of round t as a float, or UsageError: a number, finite, >= 0 (a
    negative step would be gradient *ascent*)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"lr({t}) returned {_what(value)}: a step-size function must return "
                         f"a number >= 0 for every round")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"lr({t}) returned {value}: a step-size function must return a "
                         f"finite number >= 0 (a negative step would climb the loss)")
    return value


def checked_lr(lr: float | Callable[[int], float]) -> float | Callable[[int], float]:
    """A step-size function whose every value is checked (:func:`check_lr`); a number is
    returned as it is (the API and the command line validate it up front)."""
    if not callable(lr) or getattr(lr, "checked", False):
        return lr

    def lr_of_round(t: int) -> float:
        value = lr(t)
        if value.__class__ is float and 0.0 <= value < INF:  # (NaN fails the comparison)
            return value
        return check_lr(value, t)

    # (function attributes: the type checker does not know them)
    lr_of_round.checked = True  # type: ignore[attr-defined]
    if hasattr(lr, "base"):  # (named in messages)
        lr_of_round.base = lr.base  # type: ignore[attr-defined]
    lr_of_round.__wrapped__ = lr  # type: ignore[attr-defined]
    return lr_of_round


def first_rounds_topology(spec: RunSpec) -> None:
    """Call a topology function for the first rounds and the last of every phase, for
    every run's k (Algorithm 2: each candidate's), at start (UsageError naming the function,
    k and t), so one that fails or returns no mixing matrix is refused before anything
    runs; later rounds are checked as they are planned (every process alike)."""
    if not callable(spec.topology):
        return
    from . import topology as topo

    for phase in spec.phases():
        for t in sorted({phase.start, phase.start + 1, phase.start + 2, phase.stop - 1}):
            if phase.start <= t < phase.stop:
                for holders in phase.roster(t):
                    topo.mixing(spec.topology, len(holders), t)


def first_rounds_lr(lr: float | Callable[[int], float], rounds: int) -> None:
    """Check a step-size function's values of the first rounds and the last one at start
    (UsageError), so a wrong function is refused before anything runs (on every process
    alike); later rounds are checked as they come (:func:`checked_lr`)."""
    if not callable(lr):
        return
    for t in sorted({0, 1, 2, max(0, rounds - 1)}):
        check_lr(lr(t), t)
