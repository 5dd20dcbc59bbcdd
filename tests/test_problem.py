"""The synthetic quadratic problem (mpi_teleport/DESIGN.md §5.1) and its keyed randomness."""
import numpy as np
import pytest

from mpi_teleport.core import rng
from mpi_teleport.problems.quadratic import Quadratic


def test_rows_are_the_same_alone_or_in_a_block():
    key = rng.key(1, 2, 3)
    for d in (1, 2, 3, 50, 51):
        block = rng.normals(key, np.arange(40), d)
        for i in (0, 7, 39):
            assert np.array_equal(rng.normals(key, [i], d)[0], block[i])


def _box_muller_whole(key, nodes, d):
    """The normals as one whole-array Box-Muller (how rng.normals computed them before it
    worked in cache-sized blocks): the definition the blocks must reproduce bit for bit."""
    half = (d + 1) // 2
    u = rng.uniforms(key, nodes, 2 * half)
    u1, u2 = np.ascontiguousarray(u[:, :half]), np.ascontiguousarray(u[:, half:])
    radius = np.sqrt(-2.0 * np.log(u1))
    angle = (2.0 * np.pi) * u2
    z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return z[:, :d]


@pytest.mark.parametrize("block", [5, 64, rng.NORMAL_BLOCK])
def test_normals_in_blocks_are_the_whole_array_numbers(monkeypatch, block):
    monkeypatch.setattr(rng, "NORMAL_BLOCK", block)
    key = rng.key(3, rng.STREAM_NOISE, 11)
    for nodes, d in (([4], 1), ([4], 63), ([4], 64), ([4], 65), (np.arange(9), 7),
                     (np.arange(9), 200), ([2, 5], 2 * block + 3)):
        want = _box_muller_whole(key, nodes, d)
        assert np.array_equal(rng.normals(key, nodes, d), want), (nodes, d)
        base = np.random.default_rng(1).normal(size=want.shape)
        got = base.copy()
        rng.add_normals(key, nodes, got, 0.37)
        noise = want.copy()
        noise *= 0.37  # the quadratic's order: scale the draws, then add them
        assert np.array_equal(got, base + noise), (nodes, d)


def test_normals_are_standard():
    z = rng.normals(rng.key(0), np.arange(20000), 50)
    assert abs(z.mean()) < 0.01
    assert abs(z.var() - 1) < 0.01


def test_exact_gradient_without_noise():
    p = Quadratic(n=10, d=5, sigma2=0, zeta2=3.0, seed=4)
    x = np.random.default_rng(0).normal(size=(3, 5))
    nodes = np.array([0, 4, 9])
    g = p.gradient(nodes, x, t=7)
    expected = ((nodes + 1.0) ** 2 / 10)[:, None] * (x - p.b(nodes))
    np.testing.assert_allclose(g, expected, rtol=1e-15)


def test_b_variance_and_optimum():
    p = Quadratic(n=200, d=50, sigma2=0, zeta2=10.0, seed=1)
    b = p.b(np.arange(200))
    var = (b ** 2).mean(axis=1) * (np.arange(1, 201) ** 2)  # E = zeta2 for every node
    assert abs(var.mean() - 10.0) < 0.5
    full = p.gradient(np.arange(200), np.tile(p.x_star(), (200, 1)), 0).mean(axis=0)
    assert np.abs(full).max() < 1e-12  # x* minimises the average loss


def test_noise_is_keyed_by_round_and_node():
    p = Quadratic(n=10, d=50, sigma2=10.0, zeta2=0.0, seed=2)
    x = np.zeros((1, 50))
    a = p.gradient([3], x, t=5)
    assert np.array_equal(a, p.gradient([3], x, t=5))
    assert not np.array_equal(a, p.gradient([3], x, t=6))
    assert not np.array_equal(a, p.gradient([4], x, t=5) * 16 / 25)
    noise = np.concatenate([p.gradient([0], x, t) for t in range(4000)])  # b = 0 here
    assert abs(noise.var() - 10.0 / 50) < 0.01


def test_evaluate_error_and_consensus():
    p = Quadratic(n=4, d=3, sigma2=0, zeta2=0, seed=0)  # x* = 0
    x = np.array([[1.0, 0, 0], [0, 2.0, 0]])
    m = p.evaluate(x)
    assert m["error"] == pytest.approx((1 + 4) / 2)
    assert m["consensus"] == pytest.approx(((0.25 + 1) + (0.25 + 1)) / 2)


def test_large_n_keeps_no_per_node_table():
    p = Quadratic(n=10**6, d=50, sigma2=1.0, zeta2=1.0, seed=0)
    p.gradient(np.array([5, 999_999]), np.zeros((2, 50)), 0)
    assert p._b is None  # rows regenerated on demand: O(k d) memory
