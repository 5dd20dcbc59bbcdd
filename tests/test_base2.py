"""Tests for mpi_teleport.core.base2 (Base-2 Graph, Takezawa et al., NeurIPS 2023)."""

import numpy as np
import pytest

from mpi_teleport.core.base2 import base2_matrix, base2_rounds

KS = list(range(1, 301)) + [511, 512, 513, 1000, 1023, 1024]
LARGE = [511, 512, 513, 1000, 1023, 1024]


def _ceil_log2(k):
    return (k - 1).bit_length()


def _expected_period(k):
    if k == 1:
        return 1
    p = (k & -k).bit_length() - 1
    q = k >> p
    if q == 1:
        return p
    return p + 2 * (q.bit_length() - 1) + 1


def _product(k):
    """W_{P-1} ... W_1 W_0, applied through the sparse rounds (one peer per node: O(k^2) per
    round, not the O(k^3) of dense products); test_matrix_properties holds the rounds equal
    to base2_matrix. The W are symmetric, so this is exactly consensus in either order."""
    P = np.eye(k)
    for peer, w in base2_rounds(k):
        P = w[:, None] * P + (1.0 - w)[:, None] * P[peer]
    return P


@pytest.mark.parametrize("k", KS)
def test_round_structure(k):
    rounds = base2_rounds(k)
    assert len(rounds) >= 1
    ids = np.arange(k)
    for peer, w in rounds:
        assert peer.dtype == np.int64 and peer.shape == (k,)
        assert w.dtype == np.float64 and w.shape == (k,)
        assert peer.min() >= 0 and peer.max() < k
        # symmetric pairing (an involution) => at most one peer per node
        assert np.array_equal(peer[peer], ids)
        assert np.array_equal(w, w[peer])
        assert np.all(w >= 0.0) and np.all(w <= 1.0)
        assert np.all(w[peer == ids] == 1.0)


@pytest.mark.parametrize("k", KS)
def test_period_bound(k):
    P = len(base2_rounds(k))
    assert P == _expected_period(k)
    if k == 1:
        assert P == 1
    else:
        assert P <= 2 * _ceil_log2(k) + 2


@pytest.mark.parametrize("k", KS)
def test_finite_time_exact_consensus(k):
    P = _product(k)
    assert np.max(np.abs(P - 1.0 / k)) < 1e-12


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6, 7, 12, 13, 24, 100, 255, 256, 300, 513])
def test_matrix_properties(k):
    n_rounds = len(base2_rounds(k))
    for r in range(n_rounds):
        W = base2_matrix(k, r)
        assert W.shape == (k, k)
        assert np.array_equal(W, W.T)
        assert np.all(W >= 0.0)
        np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-15)
        np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-15)
        # at most one off-diagonal nonzero per row
        off = W - np.diag(np.diag(W))
        assert np.all((off > 0).sum(axis=1) <= 1)
        # the dense matrix is the sparse round (what _product applies)
        peer, w = base2_rounds(k)[r]
        ids = np.arange(k)
        sparse = np.zeros((k, k))
        np.add.at(sparse, (ids, ids), w)
        np.add.at(sparse, (ids, peer), 1.0 - w)
        assert np.array_equal(W, sparse)
        # r is taken modulo the period
        assert np.array_equal(W, base2_matrix(k, r + n_rounds))
        assert np.array_equal(W, base2_matrix(k, r - 3 * n_rounds))


def test_k1():
    rounds = base2_rounds(1)
    assert len(rounds) == 1
    peer, w = rounds[0]
    assert peer.tolist() == [0] and w.tolist() == [1.0]
    assert base2_matrix(1, 5).tolist() == [[1.0]]


@pytest.mark.parametrize("m", range(0, 11))
def test_power_of_two_is_one_peer_hypercube(m):
    k = 2**m
    rounds = base2_rounds(k)
    if m == 0:
        assert len(rounds) == 1
        return
    assert len(rounds) == m
    ids = np.arange(k)
    for r, (peer, w) in enumerate(rounds):
        assert np.array_equal(peer, ids ^ (1 << r))
        assert np.all(w == 0.5)


def test_small_examples():
    # k = 3: hypercube on {0,1}; node 2 joins node 1 at weight 2/3; re-average {0,1}
    rounds = base2_rounds(3)
    assert [p.tolist() for p, _ in rounds] == [[1, 0, 2], [0, 2, 1], [1, 0, 2]]
    np.testing.assert_allclose(rounds[1][1], [1.0, 1 / 3, 1 / 3])
    # k = 6 = 2 * 3: Base-2 on {0,1,2} and {3,4,5}, then pairs {j, j+3}
    rounds = base2_rounds(6)
    assert len(rounds) == 4
    assert rounds[-1][0].tolist() == [3, 4, 5, 0, 1, 2]


def test_readonly_and_cached():
    a = base2_rounds(37)
    b = base2_rounds(37)
    for (p1, w1), (p2, w2) in zip(a, b):
        assert p1 is p2 and w1 is w2
        with pytest.raises(ValueError):
            p1[0] = 1
        with pytest.raises(ValueError):
            w1[0] = 0.0
    with pytest.raises(ValueError):
        base2_rounds(0)


def test_consensus_on_vector_large_k():
    # exact averaging of a random vector through the sparse representation
    for k in [99_999, 100_000, 65_537]:
        rng = np.random.default_rng(k)
        x = rng.standard_normal(k)
        mean = x.mean()
        for peer, w in base2_rounds(k):
            x = w * x + (1.0 - w) * x[peer]
        assert np.max(np.abs(x - mean)) < 1e-12


def test_large_k_period_bound():
    # (how long base2_rounds takes is for benchmarks/, not asserted here)
    base2_rounds(1001)  # an uncached size
    rounds = base2_rounds(100_003)
    assert len(rounds) <= 2 * _ceil_log2(100_003) + 2
