"""The schedule is a pure, uniform, counter-based function of (seed, n, k, t)."""
import subprocess
import sys

import numpy as np
import pytest

from mpi_teleport.core import rng, schedule


@pytest.mark.parametrize("n,k", [(1, 1), (2, 1), (2, 2), (5, 3), (25, 8), (25, 25), (100, 7), (10**6, 64)])
def test_distinct_holders_in_range(n, k):
    for t in range(50):
        h = schedule.holders(3, n, k, t)
        assert h.shape == (k,) and h.dtype == np.int64
        assert len(set(h.tolist())) == k
        assert h.min() >= 0 and h.max() < n


@pytest.mark.parametrize("n,k", [(20, 3), (20, 12), (20, 20), (1000, 1)])  # both sampling branches
def test_uniform_over_nodes_and_positions(n, k):
    rounds = 6000 if n < 100 else 50000
    counts = np.zeros((k, n))
    for t0 in range(0, rounds, 1000):
        block = schedule.holders_block(11, n, k, t0, 1000)
        for m in range(k):
            counts[m] += np.bincount(block[:, m], minlength=n)
    expected = rounds / n
    # every token position is uniform over the nodes: chi-square with n-1 dof per position
    chi2 = ((counts - expected) ** 2 / expected).sum(axis=1)
    limit = n - 1 + 6 * np.sqrt(2 * (n - 1))  # mean + 6 sd of chi-square with n-1 dof
    assert (chi2 < limit).all(), chi2  # n = 20: 45.8 (P ~ 1e-3 per position is 6 sd away)
    per_node = counts.sum(axis=0)
    if k < n:  # (with k = n every node holds a token every round: no variation)
        assert ((per_node - rounds * k / n) ** 2 / (rounds * k / n)).sum() < limit


def _reference_sample(seed, stream, n, k, t):
    """The documented construction, written plainly (Python ints, one round)."""
    if 4 * k >= n:
        w = rng.words(seed, stream, [t], n)[0].tolist()
        return sorted(range(n), key=lambda i: (w[i], i))[:k]
    w = rng.words(seed, stream, [t], k)[0].tolist()
    moved, out = {}, []
    for j in range(k):
        r = j + ((w[j] * (n - j)) >> 64)
        out.append(moved.get(r, r))
        moved[r] = moved.get(j, j)
    return out


@pytest.mark.parametrize("n,k", [(1, 1), (2, 2), (8, 4), (25, 12), (25, 7), (25, 1), (40, 9),
                                 (1000, 16), (10**12, 64)])
def test_block_rows_are_the_rounds(n, k):
    block = schedule.holders_block(4, n, k, 17, 200)
    assert block.shape == (200, k) and block.dtype == np.int64 and block.flags.c_contiguous
    for r in range(200):
        assert np.array_equal(block[r], schedule.holders(4, n, k, 17 + r))
    for r in (0, 1, 99, 199):  # the fast paths (distinct draws need no replay) change nothing
        assert block[r].tolist() == _reference_sample(4, rng.STREAM_SCHEDULE, n, k, 17 + r)
    assert np.array_equal(block[50:], schedule.holders_block(4, n, k, 67, 150))


def test_large_blocks_are_computed_in_chunks_with_the_same_rows(monkeypatch):
    whole = schedule.holders_block(2, 30, 10, 0, 50), schedule.holders_block(2, 10**6, 5, 0, 50)
    monkeypatch.setattr(schedule, "_WORDS_AT_ONCE", 70)  # dense: 2 rows a chunk; sparse: 14
    assert np.array_equal(schedule.holders_block(2, 30, 10, 0, 50), whole[0])
    assert np.array_equal(schedule.holders_block(2, 10**6, 5, 0, 50), whole[1])


def test_sparse_rows_with_repeated_draws_replay_the_shuffle():
    # n = 40, k = 9: about 60% of the rounds draw a position twice
    rows = [schedule.holders(1, 40, 9, t).tolist() for t in range(300)]
    assert all(r == _reference_sample(1, rng.STREAM_SCHEDULE, 40, 9, t) for t, r in enumerate(rows))
    words = rng.words(1, rng.STREAM_SCHEDULE, range(300), 9).tolist()
    draws = [[j + ((w * (40 - j)) >> 64) for j, w in enumerate(row)] for row in words]
    assert sum(len(set(d)) < 9 for d in draws) > 50


@pytest.mark.parametrize("n", [1, 3, 7, 8, 25, 100, 1000])
def test_search_order_block_is_search_blocks(n):
    ks = schedule.candidate_ks(n)
    block = schedule.search_order_block(6, n, 40, 30)
    assert block.shape == (30, sum(ks)) and block.dtype == np.int64
    for r in range(30):
        assert np.array_equal(np.concatenate(schedule.search_blocks(6, n, 40 + r)), block[r])
    assert block[0].tolist() == _reference_sample(6, rng.STREAM_BLOCKS, n, sum(ks), 40)


@pytest.mark.parametrize("n,k", [(5, 0), (5, 6), (0, 1), (3, -1)])
def test_bad_k_is_a_value_error(n, k):
    with pytest.raises(ValueError, match="need 1 <= k <= n"):
        schedule.holders(0, n, k, 0)
    with pytest.raises(ValueError, match="need 1 <= k <= n"):
        schedule.holders_block(0, n, k, 0, 4)


def test_pure_function_of_seed_and_round():
    a = [schedule.holders(7, 50, 5, t) for t in (9, 3, 100)]
    b = [schedule.holders(7, 50, 5, t) for t in (100, 3, 9)][::-1]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(schedule.holders(7, 50, 5, 3), schedule.holders(8, 50, 5, 3))


@pytest.mark.parametrize("n,k", [(25, 12), (10**6, 8)])  # dense and sparse
def test_seeds_and_rounds_differ(n, k):
    a, b = schedule.holders_block(7, n, k, 0, 100), schedule.holders_block(8, n, k, 0, 100)
    assert (a != b).any(axis=1).mean() > 0.9
    assert len({tuple(row) for row in a.tolist()}) > 90
    if n < 1000:  # the search order is O(n) (it holds about n/2 nodes)
        assert not np.array_equal(a[:, :8], schedule.search_order_block(7, n, 0, 100)[:, :8])


def test_same_answer_in_another_process():
    code = ("from mpi_teleport.core import schedule; import json;"
            "print(json.dumps([schedule.holders(5, 1000, 16, t).tolist() for t in (0, 1, 777)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import json

    assert json.loads(out) == [schedule.holders(5, 1000, 16, t).tolist() for t in (0, 1, 777)]


@pytest.mark.parametrize("n,expected", [
    (1, [1]), (2, [1]), (3, [1, 2]), (7, [1, 2, 4]), (8, [1, 2, 4]),
    (25, [1, 2, 4, 8]), (100, [1, 2, 4, 8, 16, 32]),
])
def test_candidates_match_the_paper(n, expected):
    # {1, 2, 4, ..., 2^(floor(log2(n+1)) - 1)}
    assert schedule.candidate_ks(n) == expected
    assert sum(expected) <= n  # Lemma 1


@pytest.mark.parametrize("n", [1, 3, 7, 8, 25, 100, 1000])
def test_search_blocks_are_disjoint(n):
    ks = schedule.candidate_ks(n)
    for t in range(30):
        blocks = schedule.search_blocks(2, n, t)
        assert [len(b) for b in blocks] == ks
        union = np.concatenate(blocks)
        assert len(set(union.tolist())) == len(union)
        assert union.min() >= 0 and union.max() < n


def test_huge_n_needs_no_n_sized_memory():
    # O(k) sampling: with n = 10^12 an O(n) array would need terabytes
    h = schedule.holders(0, 10**12, 64, 5)
    assert len(set(h.tolist())) == 64 and h.max() < 10**12
    block = schedule.holders_block(0, 10**12, 64, 5, 100)
    assert np.array_equal(block[0], h) and block.min() >= 0 and block.max() < 10**12
    assert all(len(set(row)) == 64 for row in block.tolist())
    assert block.max() > 10**11  # the draws span the whole range, not a prefix


# ----------------------------------------------------------------------------- rng.words/below
def test_words_rows_do_not_depend_on_the_block():
    block = rng.words(3, rng.STREAM_SCHEDULE, np.arange(100, 164), 9)
    assert block.shape == (64, 9) and block.dtype == np.uint64
    for r, t in enumerate(range(100, 164)):
        assert np.array_equal(rng.words(3, rng.STREAM_SCHEDULE, [t], 9)[0], block[r])
        assert np.array_equal(rng.words(3, rng.STREAM_SCHEDULE, range(t, t + 1), 9)[0], block[r])
    assert np.array_equal(rng.words(3, rng.STREAM_SCHEDULE, [140, 100, 163], 9), block[[40, 0, 63]])
    assert np.array_equal(rng.words(3, rng.STREAM_SCHEDULE, range(100, 164), 4), block[:, :4])
    assert not np.array_equal(rng.words(3, rng.STREAM_BLOCKS, [100], 9)[0], block[0])
    assert not np.array_equal(rng.words(4, rng.STREAM_SCHEDULE, [100], 9)[0], block[0])


def test_words_follow_the_documented_hash():
    mask = (1 << 64) - 1

    def mix(z):
        z ^= z >> 30
        z = (z * 0xBF58476D1CE4E5B9) & mask
        z ^= z >> 27
        z = (z * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    stream_key = rng.key(9, rng.STREAM_BLOCKS)
    for t in (0, 1, 12345, 2**40):
        round_key = mix(stream_key ^ mix((t * rng.GOLDEN + 1) & mask))
        expected = [mix((round_key + (i + 1) * rng.GOLDEN) & mask) for i in range(5)]
        assert rng.words(9, rng.STREAM_BLOCKS, [t, t + 1], 5)[0].tolist() == expected


def test_below_is_exact():
    gen = np.random.default_rng(0)
    words = [int(w) for w in gen.integers(0, 2**64, size=2000, dtype=np.uint64)]
    words += [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1] * 4
    bounds = [int(b) for b in gen.integers(1, 2**63, size=1000)]
    bounds += [int(b) for b in gen.integers(1, 2**32, size=1000)]
    bounds += [1, 1, 2**63 - 1, 2**63 - 1, 2**32 - 1, 2**32, 2**32 + 1, 3] * 3
    got = rng.below(np.array(words, dtype=np.uint64), np.array(bounds, dtype=np.uint64))
    assert got.dtype == np.int64
    assert got.tolist() == [(w * b) >> 64 for w, b in zip(words, bounds)]
    # a bound array broadcast against a block of words, below 2^32 (the short product) and not
    small = rng.below(np.array([words[:6]] * 2, dtype=np.uint64), np.array([7, 2**32 - 1, 5, 1, 9, 2]))
    assert small.tolist() == [[(w * b) >> 64 for w, b in zip(words[:6], [7, 2**32 - 1, 5, 1, 9, 2])]] * 2
