"""Properties of the topologies (mpi_teleport/DESIGN.md §4): stochasticity, symmetry, periods,
finite-time consensus and spectral gaps against independent computations."""
import math

import numpy as np
import pytest

from mpi_teleport.core import topology as topo
from mpi_teleport.core.algorithms import mix

KS = list(range(1, 65)) + [100, 127, 128, 1000]


def rounds_to_check(name, k):
    return range(topo.period(name, k))


@pytest.mark.parametrize("name", topo.TOPOLOGIES)
def test_every_round_is_doubly_stochastic(name):
    for k in KS:
        for r in rounds_to_check(name, k):
            w = topo.mixing(name, k, r).dense()
            assert w.shape == (k, k)
            assert (w >= 0).all(), (name, k, r)
            np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12, err_msg=f"{name} k={k}")
            np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12, err_msg=f"{name} k={k}")
            if topo.is_symmetric(name):
                assert np.array_equal(w, w.T), (name, k, r)


@pytest.mark.parametrize("name", topo.TOPOLOGIES)
def test_rows_receivers_and_slots_agree_with_dense(name):
    rng = np.random.default_rng(0)
    for k in (1, 2, 3, 5, 8, 12, 31):
        for r in rounds_to_check(name, k):
            m = topo.mixing(name, k, r)
            w = m.dense()
            for j in range(k):
                sources, weights = m.row(j)
                assert list(sources) == sorted(sources)
                assert np.array_equal(w[j, sources], weights)
                assert set(sources) == set(np.flatnonzero(w[j]))
                assert list(m.receivers(j)) == list(np.flatnonzero(w[:, j]))
            y = rng.normal(size=(k, 4))
            np.testing.assert_allclose(mix(m, y), w @ y, rtol=1e-13, atol=1e-13)


def test_base2_one_peer_period_and_exact_consensus():
    for k in KS:
        p = topo.period("base2", k)
        assert p <= 2 * math.ceil(math.log2(k)) + 2 if k > 1 else p == 1
        prod = np.eye(k)
        for r in range(p):
            w = topo.mixing("base2", k, r).dense()
            off = w - np.diag(np.diag(w))
            assert ((off > 0).sum(axis=1) <= 1).all(), f"k={k} round {r}: more than one peer"
            prod = prod @ w
        assert np.abs(prod - 1.0 / k).max() < 1e-12, k


def test_base2_time_varying_rounds_repeat_with_period():
    k = 25
    p = topo.period("base2", k)
    for t in range(3 * p):
        assert np.array_equal(topo.mixing("base2", k, t).dense(), topo.mixing("base2", k, t % p).dense())


@pytest.mark.parametrize("k", [2, 4, 8, 16, 32, 64, 128, 1024])
def test_onepeer_exp_exact_consensus_after_log2k_rounds(k):
    tau = int(math.log2(k))
    assert topo.period("onepeer-exp", k) == tau
    prod = np.eye(k)
    for r in range(tau):
        w = topo.mixing("onepeer-exp", k, r).dense()
        assert ((w > 0).sum(axis=1) <= 2).all()  # self + one peer
        prod = prod @ w
    assert np.abs(prod - 1.0 / k).max() < 1e-12


def independent_gap(w):
    """1 - max(|lambda_2|, |lambda_k|)^2 from the eigenvalues (no SVD)."""
    k = len(w)
    lam = np.linalg.eigvals(w)
    lam = lam[np.argsort(-np.abs(lam))]
    # drop one eigenvalue equal to 1 (the consensus direction)
    i = int(np.argmin(np.abs(lam - 1.0)))
    rest = np.delete(lam, i)
    return 1.0 - (np.abs(rest).max() ** 2 if k > 1 else 0.0)


@pytest.mark.parametrize("name", ["ring", "torus", "exp", "complete"])
def test_spectral_gap_matches_eigenvalues(name):
    for k in list(range(1, 40)) + [64, 100, 128]:
        p = topo.spectral_gap(name, k)
        assert 0 < p <= 1
        assert p == pytest.approx(independent_gap(topo.mixing(name, k, 0).dense()), abs=1e-9), (name, k)


@pytest.mark.parametrize("k", list(range(3, 40)) + [100, 1000])
def test_ring_gap_closed_form(k):
    lam = [(1 + 2 * math.cos(2 * math.pi * l / k)) / 3 for l in range(1, k)]
    assert topo.spectral_gap("ring", k) == pytest.approx(1 - max(abs(x) for x in lam) ** 2, abs=1e-10)


@pytest.mark.parametrize("tau", range(1, 11))
def test_exp_gap_closed_form_power_of_two(tau):
    # Ying et al. 2021: rho(W - J) = 1 - 2 / (1 + log2 k) for k = 2^tau
    rho = 1 - 2 / (1 + tau)
    assert topo.spectral_gap("exp", 2 ** tau) == pytest.approx(1 - rho ** 2, abs=1e-10)


def test_time_varying_topologies_report_no_gap():
    assert topo.spectral_gap("onepeer-exp", 16) is None
    assert topo.spectral_gap("base2", 25) is None


def test_torus_is_as_square_as_possible():
    assert topo.torus_shape(25) == (5, 5)
    assert topo.torus_shape(24) == (4, 6)
    assert topo.torus_shape(7) == (1, 7)  # a prime k gives a ring
    assert np.array_equal(topo.mixing("torus", 7, 0).dense(), topo.mixing("ring", 7, 0).dense())


def test_small_k_all_topologies():
    for name in topo.TOPOLOGIES:
        assert np.array_equal(topo.mixing(name, 1, 0).dense(), [[1.0]])
        for r in rounds_to_check(name, 2):
            np.testing.assert_allclose(topo.mixing(name, 2, r).dense(), 0.5)


def test_unknown_topology_is_refused():
    with pytest.raises(ValueError, match="unknown topology"):
        topo.mixing("star", 4, 0)
