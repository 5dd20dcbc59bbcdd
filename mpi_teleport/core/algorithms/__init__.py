"""The arithmetic of one round, shared by the simulator and the MPI runtime.

Both call :func:`local_step`, on all k token rows at once (simulator) or on the one row a
rank holds (MPI); a rank's gossip sum :func:`weighted_sum` does, element by element, what
the simulator's :func:`mix` does for all rows. Every operation is element-wise, so the
numbers agree bit for bit (tests/test_arithmetic.py). The round itself, who sends what
to whom and when, is :mod:`mpi_teleport.core.algorithms.teleport` (one node) and
:mod:`mpi_teleport.runtime.backends.local` (every node at once).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..contract import landed
from ..optimizers import Adam, SgdDecay, TorchRule, adam_step, decay_gradient
from ..topology import Mixing


# Elements per pass of the element-wise arithmetic. Vectors up to this size are done in
# one pass; longer ones block by block (2 MiB of float64, 1 MiB of float32), which stay
# in cache while every operation on them is done: a gossip sum of s inputs then reads
# each input once and writes x once instead of streaming a d-long accumulator through
# memory s times, and the momentum step reads v, g, x once. Each element's operations
# (hence the numbers) are those of the unblocked code.
BLOCK = 1 << 18


class Nesterov(float):
    """A momentum coefficient mu taken in Nesterov's form, as ``torch.optim.SGD(...,
    nesterov=True)``: v = mu v + g, y = x - lr (g + mu v). A plain float is heavy-ball
    (y = x - lr v). The value travels wherever the momentum does (RunSpec.momentum), so
    every back end's step sees it without another argument."""

    def __repr__(self) -> str:
        return f"Nesterov({float(self)!r})"


def _momentum_step(g: np.ndarray, v: np.ndarray, lr: float, momentum: float) -> None:
    """g <- lr * (v = mu v + g) (heavy-ball) or lr * (g + mu (v = mu v + g)) (Nesterov)."""
    if isinstance(momentum, Nesterov):
        mu = float(momentum)  # (numpy computes with a float subclass in float64, with a
        v *= mu  # plain float in the array's dtype: as torch and the heavy-ball step do)
        v += g
        g += v * mu
        g *= lr
    else:
        v *= momentum
        v += g
        np.multiply(v, lr, out=g)


def local_step(problem: Any, nodes: npt.ArrayLike, x: np.ndarray, v: np.ndarray | None, t: int,
               lr: float, momentum: float | Adam | SgdDecay | TorchRule,
               out: np.ndarray | None = None) -> np.ndarray:
    """y = x - lr * g (Alg. 1 line 10 / Alg. 3 line 8), heavy-ball when momentum > 0
    (Nesterov's form when it is a :class:`Nesterov`), Adam's step when it is an
    :class:`~mpi_teleport.core.optimizers.Adam` (``v`` then holds both moments, step count
    t + 1: every token steps once per round of its phase, which starts at 0).

    ``nodes`` are the holders of the rows of x in round t: the gradient is that of the
    *holder's* local loss. ``v`` (the token's momentum) is updated in place; y goes to
    ``out`` when given, which may not alias x. What ``gradient`` *returns* counts: a
    problem that returns a new array instead of writing ``out`` has it copied into ``out``
    (both back ends step on ``out``, so they train alike). A problem with an ``after_step(nodes, y)``
    method sees y before it is gossiped (to write state its forward pass updated).
    """
    g: np.ndarray = problem.gradient(nodes, x, t, out=out)  # (other than out: landed checks it)
    if g is not out:  # returned, not written: checked and copied into out (contract.landed)
        g = landed(problem, g, out, x)
    d = g.shape[-1]
    if isinstance(momentum, SgdDecay):  # torch's SGD weight decay, then its momentum
        decay_gradient(g, x, momentum.weight_decay, momentum.trainable)
        momentum = Nesterov(momentum.momentum) if momentum.nesterov else momentum.momentum
    if isinstance(momentum, TorchRule):  # any other torch optimizer: torch steps each row
        inner = getattr(problem, "problem", problem)
        momentum.step(g, x, cast(np.ndarray, v), lr, t, getattr(inner, "torch_settings", None))
    elif isinstance(momentum, Adam):  # (its state v: 2 d values per row; step t + 1)
        adam_step(momentum, g, x, cast(np.ndarray, v), lr, t + 1)  # (Adam: its state is given)
    elif d <= BLOCK:  # one block: the same operations on the whole vectors, no views made
        if momentum > 0:
            _momentum_step(g, cast(np.ndarray, v), lr, momentum)  # (momentum: its state is given)
        else:
            g *= lr
        np.subtract(x, g, out=g)
    else:
        _blocked_step(g, x, v, lr, momentum)
    after_step = getattr(problem, "after_step", None)
    if after_step is not None:  # state the forward pass updates (e.g. normalisation statistics)
        after_step(nodes, g)
    return g


def steps_by_columns(problem: Any, momentum: Any) -> bool:
    """Whether :func:`local_step_columns` can give local_step's numbers for ``problem``
    under this step rule: the problem has an element-wise ``gradient_columns``, no
    ``after_step`` (it sees y whole), and the rule is SGD, heavy ball or Nesterov
    (element-wise too; Adam and weight decay are computed whole)."""
    return (getattr(problem, "gradient_columns", None) is not None
            and not _has_after_step(problem)
            and not isinstance(momentum, (Adam, SgdDecay, TorchRule)))


def _has_after_step(problem: Any) -> bool:
    inner = getattr(problem, "problem", problem)  # (ProblemWithDefaults always has one)
    return getattr(inner, "after_step", None) is not None


def local_step_columns(problem: Any, nodes: npt.ArrayLike, x: np.ndarray, v: np.ndarray | None,
                       t: int, lr: float, momentum: float, out: np.ndarray,
                       columns: slice) -> None:
    """Columns ``columns`` of :func:`local_step` (y into ``out``, v in place), for a
    problem and rule where :func:`steps_by_columns` holds: called for consecutive blocks
    of columns from 0 to d, it gives local_step's numbers element by element (every
    operation is element-wise), so a rank can send a block of y while it computes the
    next (the step off the round's path)."""
    problem.gradient_columns(nodes, x, t, columns, out)
    g, xb = out[..., columns], x[..., columns]
    if momentum > 0:
        _momentum_step(g, cast(np.ndarray, v)[..., columns], lr, momentum)
    else:
        g *= lr
    np.subtract(xb, g, out=g)


def _blocked_step(g: np.ndarray, x: np.ndarray, v: np.ndarray | None, lr: float,
                  momentum: float) -> None:
    d = g.shape[-1]
    for a in range(0, d, BLOCK):  # block by block: v, g, x pass through memory once
        b = min(a + BLOCK, d)
        gb, xb = g[..., a:b], x[..., a:b]
        if momentum > 0:
            _momentum_step(gb, cast(np.ndarray, v)[..., a:b], lr, momentum)  # (as above)
        else:
            gb *= lr
        np.subtract(xb, gb, out=gb)


def work_buffer(d: int, dtype: npt.DTypeLike) -> np.ndarray:
    """The work space :func:`weighted_sum` needs for d-long vectors of ``dtype``."""
    return np.zeros(min(d, BLOCK), dtype)


def weighted_sum(weights: npt.ArrayLike, inputs: Sequence[np.ndarray], out: np.ndarray,
                 work: np.ndarray) -> np.ndarray:
    """out = sum_s weights[s] * inputs[s], added in the given (ascending source) order.

    The arithmetic is that of the token's dtype: the weights are rounded to it once, each
    product and each partial sum is rounded to it (float64 for the quadratic problem,
    float32 for network tokens, as PyTorch averages float32 models): the same operations,
    element by element, as the simulator's ``mix``, so the two agree bit for bit. Done
    block by block (each element's operations are unchanged); ``work`` is from
    :func:`work_buffer`; no allocation.
    """
    weights = np.asarray(weights, dtype=out.dtype)
    d = out.shape[-1]
    if d <= BLOCK:  # one block: the same operations on the whole vectors, no views made
        tmp = work if work.shape[-1] == d else work[..., :d]
        np.multiply(inputs[0], weights[0], out=out)
        for s in range(1, len(inputs)):
            np.multiply(inputs[s], weights[s], out=tmp)
            out += tmp
        return out
    n = min(d, BLOCK)
    for a in range(0, d, n):
        b = min(a + n, d)
        tmp, acc = work[:b - a], out[a:b]
        np.multiply(inputs[0][a:b], weights[0], out=acc)
        for w, y in zip(weights[1:], inputs[1:]):
            np.multiply(y[a:b], w, out=tmp)
            acc += tmp
    return out


_WORK: dict[tuple[str, tuple[int, ...], str], np.ndarray] = {}


def _work(name: str, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
    """Reusable work arrays (no fresh allocation, hence no page faults, per round)."""
    key = (name, tuple(shape), np.dtype(dtype).str)
    if key not in _WORK:
        if len(_WORK) > 32:
            _WORK.clear()
        _WORK[key] = np.empty(shape, dtype)
    return _WORK[key]


def mix(w: Mixing, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x_j = sum_m W[j, m] y_m for every token j, each sum in ascending m (Alg. 1 line 13).

    In y's dtype (weights rounded to it once, every product and partial sum rounded to
    it): exactly what a receiving rank does (:func:`weighted_sum`), float64 for the
    quadratic problem and float32 for network tokens. ``out`` (not aliasing y) receives
    the result. ``w`` is a :class:`mpi_teleport.core.topology.Mixing`.
    """
    k, d = y.shape
    out = np.empty_like(y) if out is None else out
    if w.complete:
        coef = y.dtype.type(1.0 / w.k)
        row, tmp = _work("row", (d,), y.dtype), _work("tmp", (d,), y.dtype)
        np.multiply(y[0], coef, out=row)
        for m in range(1, w.k):
            np.multiply(y[m], coef, out=tmp)
            row += tmp
        out[...] = row
        return out
    tmp = _work("tmp", (k, d), y.dtype)
    for s, (rows, sources, weights) in enumerate(w.slots()):
        weights = weights.astype(y.dtype, copy=False)
        if len(rows) == k:  # every receiver has an s-th source: no gather/scatter
            np.take(y, sources, axis=0, out=tmp, mode="clip")
            if s == 0:  # slot 0 covers every row (each row has itself or a source)
                np.multiply(tmp, weights, out=out)
            else:
                tmp *= weights
                out += tmp
        else:
            out[rows] += weights * y[sources]
    return out
