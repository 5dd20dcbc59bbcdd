"""The synthetic problem of the paper's Sec. 5.1 (mpi_teleport/DESIGN.md §5.1).

f_i(x) = 1/2 ||A_i (x - b_i)||^2 with A_i = (i / sqrt(n)) I_d for i = 1..n (node id i-1),
b_i ~ N(0, zeta2 / i^2 I_d), stochastic gradient = exact gradient + N(0, sigma2 / d I_d).
Every random number is keyed by (seed, node, round) (see rng.py), so the simulator and
each MPI rank draw the same values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..core import rng

# Nodes whose b_i are kept in memory at once; beyond it rows are regenerated on demand,
# so Teleportation with n = 10^6 nodes still needs O(k d) memory.
_CACHE_LIMIT = 4_000_000
_CHUNK = 8192
# x* = sum_i i^2 b_i / sum_i i^2 needs every node's b_i: n * d normal draws at set-up (a
# few million per second). Above this many (n = 5.4 million nodes at d = 50) the problem
# is refused with the estimate instead of computing for minutes to days; with zeta2 = 0
# (all b_i = 0) x* = 0 and any n starts at once.
MAX_X_STAR_DRAWS = 1 << 28
_DRAWS_PER_S = 4e6  # a conservative rate for the estimate in the message


@dataclass
class Quadratic:
    n: int
    d: int = 50
    sigma2: float = 0.0
    zeta2: float = 0.0
    seed: int = 0
    _b: np.ndarray | None = field(default=None, repr=False)
    _x_star: np.ndarray | None = field(default=None, repr=False)
    _row_cache: dict = field(default_factory=dict, repr=False)
    # noise drawn ahead (prepare): (nodes' bytes, t) -> (the draw's steps, its buffer),
    # and buffers to reuse (a fresh 40 MB array a round costs its page faults)
    _ahead: dict = field(default_factory=dict, repr=False, compare=False)
    _spares: list = field(default_factory=list, repr=False, compare=False)
    # the round's noise while gradient_columns goes through the columns: (key, buffer)
    _columns_noise: tuple | None = field(default=None, repr=False, compare=False)

    metric = "error"  # smaller is better; target reached when error <= target
    higher_is_better = False
    dtype = np.float64

    def __post_init__(self):
        from ..errors import UsageError

        draws = int(self.n) * int(self.d)
        if self.zeta2 != 0 and draws > MAX_X_STAR_DRAWS:
            hours = draws / _DRAWS_PER_S / 3600
            raise UsageError(
                f"the quadratic problem with n={self.n} nodes, d={self.d} and zeta2={self.zeta2:g} "
                f"needs n*d = {draws:.3g} normal draws for its minimiser x* (about {hours:.3g} h "
                f"at start-up); the limit is {MAX_X_STAR_DRAWS} (n*d): use fewer nodes, a "
                f"smaller --dim, or --zeta2 0 (then x* = 0 and any n starts at once)")

    @property
    def dim(self) -> int:
        return self.d

    def initial(self) -> np.ndarray:
        """x0 ~ N(0, I_d), shared by every replica."""
        return rng.normals(rng.key(self.seed, rng.STREAM_INIT), [0], self.d)[0]

    def _b_rows(self, nodes: np.ndarray) -> np.ndarray:
        z = rng.normals(rng.key(self.seed, rng.STREAM_PROBLEM), nodes, self.d)
        return (math.sqrt(self.zeta2) / (nodes + 1.0))[:, None] * z

    def b(self, nodes) -> np.ndarray:
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        if self.n * self.d <= _CACHE_LIMIT:
            if self._b is None:
                self._b = self._b_rows(np.arange(self.n, dtype=np.int64))
            return self._b[nodes]
        if len(nodes) == 1:  # an MPI rank asks for its own row every round: keep it
            node = int(nodes[0])
            if node not in self._row_cache:
                if len(self._row_cache) >= 64:
                    self._row_cache.clear()
                self._row_cache[node] = self._b_rows(nodes)
            return self._row_cache[node]
        return self._b_rows(nodes)

    def curvature(self, nodes) -> np.ndarray:
        """a_i^2 = i^2 / n as a column, for node ids (0-based) ``nodes``."""
        i = np.atleast_1d(np.asarray(nodes, dtype=np.float64)) + 1.0
        return (i * i / self.n)[:, None]

    def gradient(self, nodes, x: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Stochastic gradients of the nodes' local losses at the rows of x, round t.

        Written into ``out`` when given (no allocation on the hot path)."""
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        if self.zeta2 == 0:  # b_i = 0, and x - 0 == x exactly
            g = x.copy() if out is None else out
            if out is not None:
                np.copyto(out, x)
        else:
            g = np.subtract(x, self.b(nodes), out=out)
        g *= self.curvature(nodes)
        if self.sigma2 > 0:  # g += sqrt(sigma2 / d) * N(0, I_d)
            ahead = self._ahead.pop(_ahead_key(nodes, t), None)
            if ahead is None:  # drawn now, block by block (no d-sized temporary)
                rng.add_normals(rng.key(self.seed, rng.STREAM_NOISE, t), nodes, g,
                                math.sqrt(self.sigma2 / self.d))
            else:  # drawn ahead (prepare): the blocks the wait left undrawn, then the sum
                steps, noise = ahead
                for _ in steps:
                    pass
                g += noise
                self._spares.append(noise)
        return g

    def gradient_columns(self, nodes, x: np.ndarray, t: int, columns: slice,
                         out: np.ndarray) -> None:
        """Columns ``columns`` of :meth:`gradient` (nodes, x, t) into ``out[:, columns]``,
        reading only ``x[:, columns]``: the gradient is element-wise, so the MPI runtime
        computes a large token's step a block of columns at a time and sends each block
        while it computes the next (mpi_teleport/DESIGN.md §5.2). Called for consecutive
        column blocks from 0 to d, in order; the same numbers as :meth:`gradient`, element
        by element (the noise drawn whole, ahead or at the first block)."""
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        g = out[:, columns]
        if self.zeta2 == 0:
            np.copyto(g, x[:, columns])
        else:
            np.subtract(x[:, columns], self.b(nodes)[:, columns], out=g)
        g *= self.curvature(nodes)
        if self.sigma2 <= 0:
            return
        key = _ahead_key(nodes, t)
        if self._columns_noise is None or self._columns_noise[0] != key:
            if key not in self._ahead:
                self.prepare(nodes, t)
            steps, noise = self._ahead.pop(key)
            for _ in steps:  # what the wait left undrawn
                pass
            self._columns_noise = (key, noise)
        noise = self._columns_noise[1]
        g += noise[:, columns]
        if columns.stop is None or columns.stop >= self.d:  # the last block: noise done
            self._spares.append(noise)
            self._columns_noise = None

    def prepare(self, nodes, t: int):
        """Round t's gradient noise at ``nodes``, drawn ahead of :meth:`gradient` (the
        problem contract's optional ``prepare``): the noise does not depend on x, so a rank
        can draw it while it waits for round t - 1's messages. Returns an iterator that
        draws one block (about a millisecond) per step; :meth:`gradient` for the same
        nodes and round draws what is left and adds exactly the numbers it would have
        drawn itself. None without noise (nothing worth drawing ahead)."""
        if self.sigma2 <= 0:
            return None
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        noise = None
        while self._spares and noise is None:
            spare = self._spares.pop()
            if spare.shape == (len(nodes), self.d):
                noise = spare
        if noise is None:
            noise = np.empty((len(nodes), self.d))
        steps = rng.fill_normals(rng.key(self.seed, rng.STREAM_NOISE, t), nodes, noise,
                                 math.sqrt(self.sigma2 / self.d))
        if len(self._ahead) >= 8:  # draws never used (a run that stopped): let them go
            self._ahead.clear()
        self._ahead[_ahead_key(nodes, t)] = (steps, noise)
        return steps

    def __getstate__(self):
        """Without the draws ahead (a generator does not pickle; they are redrawn)."""
        state = dict(self.__dict__)
        state["_ahead"], state["_spares"], state["_columns_noise"] = {}, [], None
        return state

    def x_star(self) -> np.ndarray:
        """Minimiser of f = mean f_i: x* = sum_i i^2 b_i / sum_i i^2."""
        if self._x_star is None and self.zeta2 == 0:
            self._x_star = np.zeros(self.d)  # every b_i = 0: no sum over n needed
        if self._x_star is None:
            from ..runtime.signals import pending

            acc = np.zeros(self.d)
            for start in range(0, self.n, _CHUNK):
                if pending():  # a signal during set-up: nothing to checkpoint yet, stop now
                    from ..errors import Terminated

                    raise Terminated(pending(), 0)
                nodes = np.arange(start, min(self.n, start + _CHUNK), dtype=np.int64)
                acc += np.sum(self.curvature(nodes) * self.b(nodes), axis=0)
            n = int(self.n)
            if n <= 1 << 22:  # (as always computed: the committed results keep their bits)
                total = np.sum(self.curvature(np.arange(n)))
            else:  # sum_{i=1}^n i^2 / n in closed form, not an O(n) array
                total = n * (n + 1) * (2 * n + 1) // 6 / n
            self._x_star = acc / total
        return self._x_star

    def evaluate(self, x: np.ndarray) -> dict:
        """Metrics of the token matrix x (one row per token, in token order).

        error = mean_m ||x_m - x*||^2, consensus = mean_m ||x_m - mean(x)||^2; row sums
        are combined with math.fsum, which is exact, so any process gets the same value.
        """
        k = len(x)
        with np.errstate(over="ignore", invalid="ignore"):  # a diverged run reports inf/nan
            diff = x - self.x_star()
            error = math.fsum(np.sum(diff * diff, axis=1).tolist()) / k
            centred = x - np.add.reduce(x, axis=0) / k
            consensus = math.fsum(np.sum(centred * centred, axis=1).tolist()) / k
        return {"error": error, "consensus": consensus}

    validation = "averaged-model error"  # what Algorithm 2 compares; smaller is better
    validation_higher_is_better = False

    def validate(self, x: np.ndarray) -> float:
        """Error of the averaged token model, ||mean_m x_m - x*||^2 (Alg. 2 selection)."""
        diff = np.add.reduce(x, axis=0) / len(x) - self.x_star()
        return math.fsum((diff * diff).tolist())

    def reached(self, metrics: dict, target: float) -> bool:
        return metrics["error"] <= target

    def finite(self, metrics: dict) -> bool:
        return math.isfinite(metrics["error"])


def _ahead_key(nodes: np.ndarray, t: int) -> tuple[bytes, int]:
    """The key of a draw ahead: the nodes (int64) and the round."""
    return nodes.tobytes(), int(t)


def quadratic(nodes: int, seed: int = 0, *, dim: int = 50, sigma2: float = 0.0,
              zeta2: float = 0.0) -> Quadratic:
    """The paper's synthetic problem as a factory (the ``--problem`` calling convention:
    keyword arguments ``nodes`` and ``seed``, then its own settings)."""
    return Quadratic(n=int(nodes), d=int(dim), sigma2=float(sigma2), zeta2=float(zeta2),
                     seed=int(seed))
