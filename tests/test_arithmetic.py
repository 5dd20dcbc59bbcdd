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
