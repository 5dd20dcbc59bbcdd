"""Gossip topologies over k tokens (DSGD uses them over n nodes), mpi_teleport/DESIGN.md §4.

A topology gives, for round t, the mixing matrix W(t): x_j <- sum_m W(t)[j, m] y_m.
Row j lists the *sources* of receiver j; column m lists the receivers of sender m.
W(t) is stored sparse (CSR by row, sources ascending) so that every receiver sums its
inputs in ascending token order -- the order that makes the simulator and the MPI
runtime agree bit for bit. Everything here is a pure function of (name, k, t); nothing
counts its own calls.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar, cast

import numpy as np
import numpy.typing as npt

from ..errors import UsageError

TOPOLOGIES = ("ring", "torus", "exp", "onepeer-exp", "base2", "complete")
UNDIRECTED = frozenset({"ring", "torus", "base2", "complete"})

Ints = npt.NDArray[np.int64]  # node/token ids, CSR offsets
Floats = npt.NDArray[np.float64]  # mixing weights

# A topology: a built-in name, or a user function (k, t) -> W(t), a k x k array (Any:
# from_matrix checks what it returns).
Topology = str | Callable[[int, int], Any]

_A = TypeVar("_A", bound=np.ndarray)


def _read_only(a: _A) -> _A:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class Mixing:
    """W(t) of one round, sparse. ``complete`` marks W = J/k (no CSR is built)."""

    k: int
    indptr: Ints  # (k+1,)
    sources: Ints  # (nnz,), ascending within each row
    weights: Floats  # (nnz,)
    complete: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def row(self, j: int) -> tuple[Ints, Floats]:
        """(sources, weights) of receiver j, sources ascending."""
        if self.complete:
            return self._everyone(), self._uniform()
        a, b = self.indptr[j], self.indptr[j + 1]
        return self.sources[a:b], self.weights[a:b]

    def receivers(self, m: int) -> Ints:
        """Tokens j with W[j, m] > 0 (where sender m's y must go), ascending."""
        if self.complete:
            return self._everyone()
        if "receivers" not in self._cache:
            rows = np.repeat(np.arange(self.k), np.diff(self.indptr))
            order = np.lexsort((rows, self.sources))
            counts = np.bincount(self.sources, minlength=self.k)
            ptr = np.concatenate(([0], np.cumsum(counts)))
            self._cache["receivers"] = (ptr, rows[order])
        ptr, rows = self._cache["receivers"]
        return cast(Ints, rows[ptr[m]:ptr[m + 1]])

    def _everyone(self) -> Ints:
        """0..k-1, built once per matrix (complete graph: every row, every receiver list)."""
        if "everyone" not in self._cache:
            self._cache["everyone"] = _read_only(np.arange(self.k))
        return cast(Ints, self._cache["everyone"])

    def _uniform(self) -> Floats:
        if "uniform" not in self._cache:
            self._cache["uniform"] = _read_only(np.full(self.k, 1.0 / self.k))
        return cast(Floats, self._cache["uniform"])

    def padded(self) -> tuple[Ints, Floats, Ints, Ints, Ints]:
        """(sources, weights, n_sources, receivers, n_receivers): row j's sources and
        weights and column m's receivers as (k, width) arrays padded with -1 and 0.0, and
        their lengths; built once per matrix (the vectorised planner's lookup tables,
        :mod:`mpi_teleport.core.plan`)."""
        if "padded" not in self._cache:
            k = self.k
            rows = [self.row(j) for j in range(k)]
            outs = [self.receivers(m) for m in range(k)]
            width = max(1, max(len(r[0]) for r in rows), max(len(o) for o in outs))
            src = np.full((k, width), -1, dtype=np.int64)
            wts = np.zeros((k, width))
            rcv = np.full((k, width), -1, dtype=np.int64)
            n_src = np.zeros(k, dtype=np.int64)
            n_rcv = np.zeros(k, dtype=np.int64)
            for j, (sources, weights) in enumerate(rows):
                src[j, :len(sources)], wts[j, :len(sources)], n_src[j] = sources, weights, len(sources)
            for m, receivers in enumerate(outs):
                rcv[m, :len(receivers)], n_rcv[m] = receivers, len(receivers)
            self._cache["padded"] = tuple(_read_only(a) for a in (src, wts, n_src, rcv, n_rcv))
        return cast("tuple[Ints, Floats, Ints, Ints, Ints]", self._cache["padded"])

    def slots(self) -> list[tuple[Ints, Ints, Floats]]:
        """Vectorised view for the simulator: per slot s, the receivers having an s-th
        source, that source and its weight. Summing slot by slot adds each row's inputs
        in ascending source order, exactly as a single receiver does."""
        if "slots" not in self._cache:
            deg = np.diff(self.indptr)
            out = []
            for s in range(int(deg.max()) if self.k else 0):
                rows = np.nonzero(deg > s)[0]
                idx = self.indptr[rows] + s
                out.append((rows, self.sources[idx], self.weights[idx][:, None]))
            self._cache["slots"] = out
        return cast("list[tuple[Ints, Ints, Floats]]", self._cache["slots"])

    def dense(self) -> Floats:
        if self.complete:
            return np.full((self.k, self.k), 1.0 / self.k)
        w = np.zeros((self.k, self.k))
        rows = np.repeat(np.arange(self.k), np.diff(self.indptr))
        w[rows, self.sources] = self.weights
        return w


def _from_entries(k: int, rows: npt.ArrayLike, cols: npt.ArrayLike,
                  vals: npt.ArrayLike) -> Mixing:
    """CSR from (row, col, value) triples; duplicate entries are summed."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.float64)
    flat = rows * k + cols
    uniq, inv = np.unique(flat, return_inverse=True)
    summed = np.zeros(len(uniq))
    np.add.at(summed, inv, vals)
    r, c = uniq // k, uniq % k
    keep = summed > 0
    r, c, summed = r[keep], c[keep], summed[keep]
    indptr = np.concatenate(([0], np.cumsum(np.bincount(r, minlength=k))))
    return Mixing(k, indptr, c, summed)


def _circulant(k: int, shifts: Sequence[int], weight: float, self_weight: float) -> Mixing:
    """W[j, j] = self_weight and W[j, j - s] = weight for each shift s (mod k)."""
    j = np.arange(k)
    rows = [j] + [j for _ in shifts]
    cols = [j] + [(j - s) % k for s in shifts]
    vals = [np.full(k, self_weight)] + [np.full(k, weight) for _ in shifts]
    return _from_entries(k, np.concatenate(rows), np.concatenate(cols), np.concatenate(vals))


def torus_shape(k: int) -> tuple[int, int]:
    """k = a * b with a <= b and a as large as possible (as square as possible)."""
    a = max(d for d in range(1, math.isqrt(k) + 1) if k % d == 0)
    return a, k // a


def _ring(k: int) -> Mixing:
    if k <= 2:
        return _complete(k)
    return _circulant(k, (1, -1), 1.0 / 3.0, 1.0 / 3.0)


def _torus(k: int) -> Mixing:
    a, b = torus_shape(k)
    node = np.arange(k)
    r, c = node // b, node % b
    neighbours: list[Ints] = []
    step: Callable[[int], Ints]
    for size, step in ((b, lambda s: r * b + (c + s) % b), (a, lambda s: ((r + s) % a) * b + c)):
        if size >= 3:
            neighbours += [step(1), step(-1)]
        elif size == 2:
            neighbours += [step(1)]
    w = 1.0 / (len(neighbours) + 1)  # regular graph: uniform weights are doubly stochastic
    rows = np.concatenate([node] * (len(neighbours) + 1))
    cols = np.concatenate([node] + neighbours)
    return _from_entries(k, rows, cols, np.full(len(rows), w))


def _exp(k: int) -> Mixing:
    """Static exponential graph (Ying et al. 2021): i -> i + 2^q, q < ceil(log2 k)."""
    if k == 1:
        return _complete(1)
    tau = math.ceil(math.log2(k))
    return _circulant(k, [1 << q for q in range(tau)], 1.0 / (tau + 1), 1.0 / (tau + 1))


def _onepeer_exp(k: int, r: int) -> Mixing:
    """One-peer exponential graph (Ying et al. 2021): round r, i -> i + 2^(r mod tau)."""
    if k == 1:
        return _complete(1)
    return _circulant(k, [1 << r], 0.5, 0.5)


def _base2(k: int, r: int) -> Mixing:
    from .base2 import base2_rounds

    peer, self_weight = base2_rounds(k)[r]
    node = np.arange(k)
    paired = peer != node
    rows = np.concatenate([node, node[paired]])
    cols = np.concatenate([node, peer[paired]])
    vals = np.concatenate([self_weight, 1.0 - self_weight[paired]])
    return _from_entries(k, rows, cols, vals)


def _complete(k: int) -> Mixing:
    empty = np.zeros(0, dtype=np.int64)
    return Mixing(k, np.zeros(k + 1, dtype=np.int64), empty, np.zeros(0), complete=True)


def period(name: str, k: int) -> int:
    """Rounds after which W(t) repeats (1 for static graphs)."""
    check(name, k)
    if name == "onepeer-exp":
        return max(1, math.ceil(math.log2(k))) if k > 1 else 1
    if name == "base2":
        from .base2 import base2_rounds

        return len(base2_rounds(k))
    return 1


@functools.lru_cache(maxsize=4096)
def _mixing(name: str, k: int, r: int) -> Mixing:
    if name == "ring":
        return _ring(k)
    if name == "torus":
        return _torus(k)
    if name == "exp":
        return _exp(k)
    if name == "onepeer-exp":
        return _onepeer_exp(k, r)
    if name == "base2":
        return _base2(k, r)
    return _complete(k)


def check(name: str, k: int) -> None:
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
    if k < 1:
        raise ValueError(f"a topology needs at least one node, got k={k}")


def mixing(name: Topology, k: int, t: int) -> Mixing:
    """W(t) of topology ``name`` over k tokens; ``name`` may also be a user function
    ``(k, t) -> W`` returning a k x k array (see :func:`from_matrix`)."""
    if callable(name):
        return _user_mixing(name, k, t)
    return _mixing(name, k, t % period(name, k))


def from_matrix(w: npt.ArrayLike, k: int, tol: float = 1e-9,
                source: str = "the topology function") -> Mixing:
    """A user's k x k mixing matrix as a Mixing, after checking that it is one: numbers,
    finite, non-negative, rows and columns summing to 1 (doubly stochastic, Assumption
    5); else UsageError, one line naming ``source`` (the call that returned ``w``)."""
    want = (f"it must return W(t), a {k} x {k} array of numbers >= 0 whose every row and "
            f"column sums to 1")
    if w is None:
        raise UsageError(f"{source} returned None; {want}")
    try:
        w = np.asarray(w, dtype=np.float64)
    except (TypeError, ValueError) as exc:  # strings, ragged rows, objects
        raise UsageError(f"{source} returned a {type(w).__name__} that is not an array of "
                         f"numbers ({_first_line(exc)}); {want}") from None
    if w.shape != (k, k):
        raise UsageError(f"{source} returned a matrix of shape {w.shape}; {want} (one row "
                         f"and column per token)")
    if not np.isfinite(w).all() or (w < 0).any():
        raise UsageError(f"{source} returned a matrix with a negative or non-finite entry; "
                         f"{want}")
    rows, cols = w.sum(axis=1), w.sum(axis=0)
    if np.abs(rows - 1).max() > tol or np.abs(cols - 1).max() > tol:
        raise UsageError(f"{source} returned a matrix that is not doubly stochastic (row "
                         f"sums {rows.min():.6g}..{rows.max():.6g}, column sums "
                         f"{cols.min():.6g}..{cols.max():.6g}); {want}")
    r, c = np.nonzero(w)
    return _from_entries(k, r, c, w[r, c])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


_USER_CACHE: dict[tuple[int, int, int], tuple[Callable[[int, int], Any], Mixing]] = {}


def _user_mixing(fn: Callable[[int, int], Any], k: int, t: int) -> Mixing:
    """W(t) of a user function, checked once per (function, k, t) and kept a while (the
    plan asks for the same round several times). What the function does wrong (raises,
    returns something else) is one UsageError naming it, k and t: a pure function of
    (k, t), so every process meets it at the same round (under MPI the back end raises it
    on every rank together, mpi_teleport/DESIGN.md §9.1)."""
    key = (id(fn), k, t)
    hit = _USER_CACHE.get(key)
    if hit is not None and hit[0] is fn:
        return hit[1]
    if len(_USER_CACHE) > 256:
        _USER_CACHE.clear()
    source = f"topology function {describe(fn)[len('custom:'):]}(k={k}, t={t})"
    try:
        w = fn(k, t)
    except Exception as exc:  # noqa: BLE001  (the user's function: say which and where)
        raise UsageError(f"{source} raised {_first_line(exc)}; a topology function is called "
                         f"as f(k, t) and must return W(t), a {k} x {k} doubly stochastic "
                         f"array") from exc
    w = from_matrix(w, k, source=source)
    _USER_CACHE[key] = (fn, w)
    return w


def describe(topology: Topology) -> str:
    """A name for config.json and summaries: the built-in name, or the function's."""
    if callable(topology):
        return f"custom:{getattr(topology, '__qualname__', type(topology).__name__)}"
    return str(topology)


def is_symmetric(name: str) -> bool:
    return name in UNDIRECTED


@functools.lru_cache(maxsize=256)
def spectral_gap(name: Topology, k: int) -> float | None:
    """p = 1 - ||W - J/k||_2^2 for static topologies; None for time-varying ones.

    For the symmetric (and the circulant, hence normal) graphs here this equals
    1 - max(|lambda_2|, |lambda_k|)^2 of the paper's Assumption 5.
    """
    if callable(name):
        return None
    check(name, k)
    if period(name, k) != 1:
        return None
    if name == "complete" or k == 1:
        return 1.0
    w = mixing(name, k, 0).dense() - 1.0 / k
    sigma = np.linalg.norm(w, 2)
    return float(1.0 - sigma * sigma)
