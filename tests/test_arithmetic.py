"""The per-round arithmetic one rank does equals the simulator's, bit for bit.

A receiving rank sums its inputs with ``algorithms.weighted_sum``; the simulator mixes all
k tokens at once with ``algorithms.mix``. Both work in the token's dtype (float64 for the
quadratic problem, float32 for network tokens) and add in ascending source order, so
every row must agree exactly, also when the vector is processed block by block.
"""
import numpy as np
import pytest

from mpi_teleport.core import algorithms
from mpi_teleport.core import topology as topo

TOPOLOGIES = list(topo.TOPOLOGIES)


def _rank_side(w: topo.Mixing, y: np.ndarray) -> np.ndarray:
    out = np.empty_like(y)
    work = algorithms.work_buffer(y.shape[1], y.dtype)
    for j in range(w.k):
        sources, weights = w.row(j)
        algorithms.weighted_sum(weights, [y[s] for s in sources], out[j], work)
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("block", [algorithms.BLOCK, 7])  # 7: many blocks and a ragged last one
def test_rank_sum_equals_simulator_mix(topology, dtype, block, monkeypatch):
    monkeypatch.setattr(algorithms, "BLOCK", block)
    k, d = 9, 50
    y = np.random.default_rng(3).standard_normal((k, d)).astype(dtype)
    for t in range(topo.period(topology, k)):
        w = topo.mixing(topology, k, t)
        expected = algorithms.mix(w, y)
        got = _rank_side(w, y)
        assert got.dtype == dtype and expected.dtype == dtype
        assert np.array_equal(got, expected), (topology, t)


@pytest.mark.parametrize("topology", ["ring", "complete"])
def test_float32_tokens_are_summed_in_float32(topology):
    """Weights rounded to float32 once; every product and partial sum rounded to float32,
    in ascending source order (what PyTorch does when it averages float32 models)."""
    k, d = 6, 40
    y = np.random.default_rng(5).standard_normal((k, d)).astype(np.float32)
    w = topo.mixing(topology, k, 0)
    mixed = algorithms.mix(w, y)
    for j in range(k):
        sources, weights = w.row(j)
        acc = np.float32(weights[0]) * y[sources[0]]
        for s, wt in zip(sources[1:], weights[1:]):
            acc = acc + np.float32(wt) * y[s]
        assert acc.dtype == np.float32
        assert np.array_equal(mixed[j], acc)


def test_weighted_sum_allocates_nothing_per_block():
    """The work space is one block of the token's dtype, whatever d is."""
    assert algorithms.work_buffer(10, np.float32).shape == (10,)
    assert algorithms.work_buffer(10 * algorithms.BLOCK, np.float32).shape == (algorithms.BLOCK,)
    assert algorithms.work_buffer(10, np.float32).dtype == np.float32


@pytest.mark.parametrize("momentum", [0.0, 0.9, algorithms.Nesterov(0.9)],
                         ids=["sgd", "heavy-ball", "nesterov"])
@pytest.mark.parametrize("zeta2, sigma2", [(1.0, 1.0), (0.0, 1.0), (1.0, 0.0)])
@pytest.mark.parametrize("drawn_ahead", [0, 2, None], ids=["not-ahead", "partly-ahead", "all-ahead"])
def test_step_by_columns_equals_the_whole_step(momentum, zeta2, sigma2, drawn_ahead, monkeypatch):
    """local_step_columns over consecutive blocks of columns (uneven, across the noise's
    Box-Muller halves and its draw blocks) gives local_step's y and v bit for bit, with the
    quadratic's noise not drawn ahead, partly drawn (prepare's iterator advanced twice) or
    all drawn; the problem's draws ahead are used up and its buffer kept for the next."""
    from mpi_teleport.core import rng
    from mpi_teleport.problems.quadratic import Quadratic

    monkeypatch.setattr(rng, "NORMAL_BLOCK", 64)  # several draw blocks in a row
    d, t, lr, nodes = 1001, 7, 0.05, [2]
    p = Quadratic(n=5, d=d, sigma2=sigma2, zeta2=zeta2, seed=4)
    assert algorithms.steps_by_columns(p, momentum)
    x = np.random.default_rng(0).standard_normal((1, d))
    v0 = np.random.default_rng(1).standard_normal((1, d))
    v_whole, y_whole = v0.copy(), np.empty((1, d))
    algorithms.local_step(p, nodes, x, v_whole, t, lr, momentum, out=y_whole)
    for cuts in ([0, d], [0, 1, 500, 501, 999, d], list(range(0, d, 64)) + [d]):
        if drawn_ahead is not None and sigma2 > 0:
            steps = p.prepare(nodes, t)
            for _ in range(drawn_ahead):
                next(steps)
        elif sigma2 > 0:
            for _ in p.prepare(nodes, t):
                pass
        v, y = v0.copy(), np.full((1, d), np.nan)
        for a, b in zip(cuts[:-1], cuts[1:]):
            algorithms.local_step_columns(p, nodes, x, v, t, lr, momentum, y, slice(a, b))
        assert np.array_equal(y, y_whole) and np.array_equal(v, v_whole), cuts
        assert not p._ahead and p._columns_noise is None


def test_steps_by_columns_only_where_the_step_is_element_wise():
    from mpi_teleport.core.optimizers import Adam
    from mpi_teleport.problem import ProblemWithDefaults
    from mpi_teleport.problems.quadratic import Quadratic

    p = Quadratic(n=3, d=4)
    assert algorithms.steps_by_columns(ProblemWithDefaults(p), 0.9)
    assert not algorithms.steps_by_columns(p, Adam())  # Adam is computed whole

    class WithAfterStep(Quadratic):
        def after_step(self, nodes, y):  # sees y whole before it is sent
            pass

    assert not algorithms.steps_by_columns(ProblemWithDefaults(WithAfterStep(n=3, d=4)), 0.0)

    class Means:  # no gradient_columns: stepped whole
        dim, dtype = 4, np.float64

        def initial(self):
            return np.zeros(4)

        def gradient(self, nodes, x, t, out=None):
            return x

        def evaluate(self, x):
            return {"error": 0.0}

    assert not algorithms.steps_by_columns(ProblemWithDefaults(Means()), 0.0)
