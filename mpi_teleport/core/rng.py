"""Counter-based randomness: every random number is a pure function of its key.

mpi_teleport/DESIGN.md §3.1 asks that node i's randomness in round t depend only on (seed, i, t), so
that a rank of the MPI runtime and the single-process simulator draw identical numbers
without sharing any generator state. Two tools serve that:

* :func:`normals` -- Gaussian rows for many nodes at once. Words come from a SplitMix64
  hash of (key, node, index), so the row of node i is the same whether it is computed
  alone (one MPI rank) or inside a block of 10^4 rows (the simulator). Box-Muller turns
  words into normals with element-wise ufuncs on contiguous arrays.
* :func:`words` and :func:`below` -- hash words for a block of rounds at once, and exact
  bounded integers from them (the schedule, mpi_teleport/DESIGN.md §3.2).
* :func:`generator` -- a numpy ``Generator`` on Philox keyed by (seed, stream, t, i),
  for draws whose count varies (mini-batch indices).
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import numpy.typing as npt

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15

# Stream ids keep unrelated uses of the same (seed, t) apart.
STREAM_SCHEDULE = 1
STREAM_BLOCKS = 2
STREAM_NOISE = 3
STREAM_PROBLEM = 4
STREAM_INIT = 5
STREAM_BATCH = 6
STREAM_DATA = 7
STREAM_TORCH = 8  # seeds torch's generator for a row's forward pass (dropout)
STREAM_GLOBALS = 9  # numpy's and Python's global generators while a row's batch is read
STREAM_AUGMENT = 10  # the generator a TorchProblem's augment hook receives
STREAM_EVAL_SAMPLE = 11  # the fixed training sample evaluated when there is no test set
STREAM_EVAL_CHUNK = 12  # global generators while an evaluation chunk is read
STREAM_EPOCH = 13  # a node's shuffled order of its share for one pass (sampling="epochs")
STREAM_TEST_SUBSAMPLE = 14  # the fixed test samples a TorchProblem(test_samples=) evaluates


def _mix_int(z: int) -> int:
    """SplitMix64 finaliser on a Python int (used for scalar keys)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _const(value: int) -> npt.NDArray[np.uint64]:
    """A read-only 0-d uint64 array: as an operand it dispatches faster than a numpy scalar,
    which matters when a call mixes only a few dozen words."""
    c = np.array(value, dtype=np.uint64)
    c.flags.writeable = False
    return c


_S30, _S27, _S31 = _const(30), _const(27), _const(31)
_M1, _M2 = _const(0xBF58476D1CE4E5B9), _const(0x94D049BB133111EB)
_GOLDEN, _ONE = _const(GOLDEN), _const(1)


def _mix_array(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64 finaliser on a uint64 array (wrapping arithmetic); ``z`` is not changed."""
    z = z ^ (z >> _S30)  # a new array: the steps below work in place on it
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


@functools.lru_cache(maxsize=1024)
def key(*parts: int) -> int:
    """A 64-bit key from integers (seed, stream, round, ...); order matters."""
    h = 0x6A09E667F3BCC908
    for p in parts:
        h = _mix_int(h ^ _mix_int((int(p) + GOLDEN) & MASK64))
    return h


def _node_keys(k: int, nodes: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Each node's key under k, as a (len(nodes), 1) column."""
    nodes = np.asarray(nodes, dtype=np.uint64).reshape(-1, 1)
    return _mix_array(np.uint64(k) ^ _mix_array(nodes * np.uint64(GOLDEN) + np.uint64(1)))


_TO_UNIT = _const(11)
_ULP53 = 1.0 / 9007199254740992.0


def _unit(node_keys: npt.NDArray[np.uint64], first: int, count: int) -> npt.NDArray[np.float64]:
    """Uniforms in (0, 1] of words first + 1 .. first + count of every node key's row."""
    counters = _counters(count) + np.uint64((first * GOLDEN) & MASK64)  # (first + i + 1) G
    words = _mix_array(node_keys + counters)
    words >>= _TO_UNIT
    u = words.astype(np.float64)
    u += 1.0
    u *= _ULP53
    return u


def uniforms(k: int, nodes: npt.ArrayLike, count: int) -> npt.NDArray[np.float64]:
    """(len(nodes), count) float64 uniforms in (0, 1], row i a pure function of (k, node)."""
    return _unit(_node_keys(k, nodes), 0, count)


# Normals are made in blocks of at most this many pairs (rows times columns), so that a
# block's temporaries stay in the cache: at d = 5 million (a 40 MB token) one row takes a
# third of the time it took whole (the quadratic's noise was most of the local step).
# Every operation is element-wise on contiguous arrays, so the numbers do not depend on it.
NORMAL_BLOCK = 1 << 14


def _normal_blocks(k: int, nodes: npt.ArrayLike, d: int) -> Iterator[
        tuple[slice, slice, npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    """The Box-Muller pairs of :func:`normals` block by block: (rows, columns, radius *
    cos, radius * sin), where the cosines fill columns ``columns`` of the rows ``rows`` and
    the sines the same columns shifted by half = ceil(d / 2)."""
    node_keys = _node_keys(k, np.atleast_1d(np.asarray(nodes, dtype=np.int64)))
    half = (d + 1) // 2
    width = min(half, NORMAL_BLOCK)
    rows_per = max(1, NORMAL_BLOCK // max(1, width))
    for r in range(0, len(node_keys), rows_per):
        keys = node_keys[r:r + rows_per]
        for a in range(0, half, width):
            m = min(width, half - a)
            radius = _unit(keys, a, m)  # u1: words a+1.. of the row
            np.log(radius, out=radius)
            radius *= -2.0
            np.sqrt(radius, out=radius)
            angle = _unit(keys, half + a, m)  # u2: words half+a+1.. of the row
            angle *= 2.0 * np.pi
            cos = np.cos(angle)
            cos *= radius
            np.sin(angle, out=angle)
            angle *= radius
            yield slice(r, r + len(keys)), slice(a, a + m), cos, angle


def normals(k: int, nodes: npt.ArrayLike, d: int) -> npt.NDArray[np.float64]:
    """Standard normal rows, shape (len(nodes), d): row r depends only on (k, nodes[r]).

    Box-Muller: element j < ceil(d/2) of a row is r cos(2 pi u2) and element ceil(d/2) + j
    is r sin(2 pi u2), with r = sqrt(-2 log u1), u1 the row's uniform word j and u2 its word
    ceil(d/2) + j. Computed in blocks of contiguous arrays (:data:`NORMAL_BLOCK`), so every
    ufunc sees the same layout whether one row or many, whole or in blocks.
    """
    count = len(np.atleast_1d(nodes))
    half = (d + 1) // 2
    z = np.empty((count, 2 * half), dtype=np.float64)
    for rows, cols, cos, sin in _normal_blocks(k, nodes, d):
        z[rows, cols] = cos
        z[rows, cols.start + half:cols.stop + half] = sin
    return z[:, :d] if 2 * half != d else z


def _scaled_blocks(k: int, nodes: npt.ArrayLike, d: int, scale: float) -> Iterator[
        tuple[slice, slice, npt.NDArray[np.float64], slice, npt.NDArray[np.float64]]]:
    """``scale * normals(k, nodes, d)`` block by block: (rows, cosine columns, their
    values, sine columns, their values), the sines cut at column d when d is odd."""
    half = (d + 1) // 2
    for rows, cols, cos, sin in _normal_blocks(k, nodes, d):
        cos *= scale
        stop = min(cols.stop + half, d)
        sin = sin[:, :max(0, stop - cols.start - half)]
        sin *= scale
        yield rows, cols, cos, slice(cols.start + half, stop), sin


def add_normals(k: int, nodes: npt.ArrayLike, out: npt.NDArray[np.float64], scale: float) -> None:
    """``out += scale * normals(k, nodes, d)`` (out of shape (len(nodes), d)), the same
    numbers without the (len(nodes), d) temporary."""
    for rows, cos_cols, cos, sin_cols, sin in _scaled_blocks(k, nodes, out.shape[1], scale):
        out[rows, cos_cols] += cos
        out[rows, sin_cols] += sin


def fill_normals(k: int, nodes: npt.ArrayLike, out: npt.NDArray[np.float64],
                 scale: float) -> Iterator[None]:
    """Writes ``scale * normals(k, nodes, d)`` into ``out`` (shape (len(nodes), d)) block by
    block, yielding after each block (a caller may do other work between blocks): the
    addends of :func:`add_normals`, the same numbers."""
    for rows, cos_cols, cos, sin_cols, sin in _scaled_blocks(k, nodes, out.shape[1], scale):
        out[rows, cos_cols] = cos
        out[rows, sin_cols] = sin
        yield


@functools.lru_cache(maxsize=64)
def _counters(count: int) -> npt.NDArray[np.uint64]:
    """(i + 1) * GOLDEN for i < count (wrapping), read-only: the per-word offsets."""
    c = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(GOLDEN)
    c.flags.writeable = False
    return c


def _round_key_int(stream_key: int, t: int) -> int:
    return _mix_int(stream_key ^ _mix_int(((int(t) & MASK64) * GOLDEN + 1) & MASK64))


def words(seed: int, stream: int, ts: Any, count: int) -> npt.NDArray[np.uint64]:
    """Hash words, uint64 of shape (len(ts), count): word [r, i] is a pure function of
    (seed, stream, ts[r], i), so a round's row is the same computed alone or in a block.

    SplitMix64 construction: stream key K = key(seed, stream); round key
    R(t) = mix(K ^ mix(t * GOLDEN + 1)); word i = mix(R(t) + (i + 1) * GOLDEN), where mix
    is the SplitMix64 finaliser and arithmetic wraps mod 2^64 (the shape of
    :func:`uniforms`, with a round in place of a node).
    """
    # ts: one round, a range or a sequence/array of rounds (Any: told apart at run time)
    stream_key = key(seed, stream)
    counters = _counters(count)
    if isinstance(ts, range):
        ts = [ts.start] if len(ts) == 1 else np.arange(ts.start, ts.stop, ts.step, dtype=np.int64)
    elif np.ndim(ts) == 0:
        ts = [ts]
    if len(ts) == 1:  # one round: its key in Python ints costs less than 10 ufunc calls
        z = counters + _round_key_int(stream_key, int(ts[0]))  # (a Python int < 2^64: uint64)
        return _mix_array(z).reshape(1, count)
    z = np.asarray(ts).astype(np.uint64) * _GOLDEN
    z += _ONE
    round_keys = _mix_array(z)
    round_keys ^= stream_key
    z = _mix_array(round_keys)[:, None] + counters[None, :]
    return _mix_array(z)


_LOW32, _SHIFT32 = _const(0xFFFFFFFF), _const(32)


def below(words: npt.ArrayLike, bounds: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """floor(words * bounds / 2^64) exactly, element-wise (broadcasting): an integer in
    [0, bounds) from each uint64 word (Lemire's multiply-high; bias < bounds / 2^64).

    numpy has no 128-bit product, so the high half is assembled from 32-bit limbs, every
    partial product and carry fitting in uint64. ``bounds`` must be in [1, 2^63).
    """
    w = np.asarray(words, dtype=np.uint64)
    b = np.asarray(bounds, dtype=np.uint64)
    w_hi, w_lo = w >> _SHIFT32, w & _LOW32
    if int(b.max(initial=0)) >> 32 == 0:  # bounds < 2^32: two partial products, no overflow
        return ((w_hi * b + ((w_lo * b) >> _SHIFT32)) >> _SHIFT32).astype(np.int64)
    b_hi, b_lo = b >> _SHIFT32, b & _LOW32  # b_hi < 2^31
    lo_lo = w_lo * b_lo
    lo_hi = w_lo * b_hi
    hi_lo = w_hi * b_lo
    carry = (lo_lo >> _SHIFT32) + (lo_hi & _LOW32) + (hi_lo & _LOW32)  # < 3 * 2^32
    high = w_hi * b_hi
    high += lo_hi >> _SHIFT32
    high += hi_lo >> _SHIFT32
    high += carry >> _SHIFT32
    return high.astype(np.int64)


def _philox_state(seed: int, stream: int, t: int, i: int) -> dict[str, Any]:
    return {
        "bit_generator": "Philox",
        "state": {"counter": np.array([0, 0, int(i) & MASK64, 0], dtype=np.uint64),
                  "key": np.array([key(seed, stream), int(t) & MASK64], dtype=np.uint64)},
        "buffer": np.zeros(4, dtype=np.uint64), "buffer_pos": 4, "has_uint32": 0, "uinteger": 0,
    }


def generator(seed: int, stream: int, t: int, i: int = 0) -> np.random.Generator:
    """A Philox generator keyed by (seed, stream, t, i): for variable-count draws."""
    bits = np.random.Philox(key=np.zeros(2, dtype=np.uint64))
    bits.state = cast(Any, _philox_state(seed, stream, t, i))  # (numpy's stubs: a TypedDict)
    return np.random.Generator(bits)


_SCRATCH = np.random.Generator(np.random.Philox(key=np.zeros(2, dtype=np.uint64)))
_SCRATCH_STATE = _philox_state(0, 0, 0, 0)  # refilled in place: no arrays built per call


def scratch_generator(seed: int, stream: int, t: int, i: int = 0) -> np.random.Generator:
    """The same stream as :func:`generator`, on one reused object (no construction cost,
    which dominated a round of small runs). Valid only until the next call: draw at once."""
    state = _SCRATCH_STATE["state"]
    state["counter"][2] = int(i) & MASK64
    state["key"][0] = key(seed, stream)
    state["key"][1] = int(t) & MASK64
    _SCRATCH.bit_generator.state = _SCRATCH_STATE
    return _SCRATCH
