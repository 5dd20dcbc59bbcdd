"""Counter-based randomness: every random number is a pure function of its key.

mpi_teleport/DESIGN.md §3.1 asks that node i's randomness in round t depend only on (seed, i, t), so
that a rank of the MPI runtime and the single-process simulator draw identical numbers
without sharing any generator state. Two tools serve that:

* :func:`normals` -- Gaussian rows for many nodes at once. Words come from a SplitMix64
  hash of (key, node, index), so the row of node i is the same whether it is computed
  alone (one MPI rank) or inside a block of 10^4 rows (the simulator). Box-Muller turns
  words into normals with element-wise ufuncs on contiguous arrays.
* :func:`generator` -- a numpy ``Generator`` on Philox keyed by (seed, stream, t, i),
  for draws whose count varies (rejection sampling: schedules, mini-batches).
"""
from __future__ import annotations

import functools

import numpy as np

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


def _mix_int(z: int) -> int:
    """SplitMix64 finaliser on a Python int (used for scalar keys)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _mix_array(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (wrapping arithmetic)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@functools.lru_cache(maxsize=1024)
def key(*parts: int) -> int:
    """A 64-bit key from integers (seed, stream, round, ...); order matters."""
    h = 0x6A09E667F3BCC908
    for p in parts:
        h = _mix_int(h ^ _mix_int((int(p) + GOLDEN) & MASK64))
    return h


def uniforms(k: int, nodes: np.ndarray, count: int) -> np.ndarray:
    """(len(nodes), count) float64 uniforms in (0, 1], row i a pure function of (k, node)."""
    nodes = np.asarray(nodes, dtype=np.uint64).reshape(-1, 1)
    node_keys = _mix_array(np.uint64(k) ^ _mix_array(nodes * np.uint64(GOLDEN) + np.uint64(1)))
    counters = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(GOLDEN)
    words = _mix_array(node_keys + counters)
    return ((words >> np.uint64(11)).astype(np.float64) + 1.0) * (1.0 / 9007199254740992.0)


def normals(k: int, nodes, d: int) -> np.ndarray:
    """Standard normal rows, shape (len(nodes), d): row r depends only on (k, nodes[r]).

    Box-Muller on two independent contiguous uniform blocks, so every ufunc sees the same
    contiguous layout whether one row or many are computed.
    """
    nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
    half = (d + 1) // 2
    u = uniforms(k, nodes, 2 * half)
    u1 = np.ascontiguousarray(u[:, :half])
    u2 = np.ascontiguousarray(u[:, half:])
    radius = np.sqrt(-2.0 * np.log(u1))
    angle = (2.0 * np.pi) * u2
    z = np.empty((len(nodes), 2 * half), dtype=np.float64)
    z[:, :half] = radius * np.cos(angle)
    z[:, half:] = radius * np.sin(angle)
    return z[:, :d] if 2 * half != d else z


def _philox_state(seed: int, stream: int, t: int, i: int) -> dict:
    return {
        "bit_generator": "Philox",
        "state": {"counter": np.array([0, 0, int(i) & MASK64, 0], dtype=np.uint64),
                  "key": np.array([key(seed, stream), int(t) & MASK64], dtype=np.uint64)},
        "buffer": np.zeros(4, dtype=np.uint64), "buffer_pos": 4, "has_uint32": 0, "uinteger": 0,
    }


def generator(seed: int, stream: int, t: int, i: int = 0) -> np.random.Generator:
    """A Philox generator keyed by (seed, stream, t, i): for variable-count draws."""
    bits = np.random.Philox(key=np.zeros(2, dtype=np.uint64))
    bits.state = _philox_state(seed, stream, t, i)
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
