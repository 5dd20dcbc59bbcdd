"""What many test files share: the repository's root, and run records without their
wall-clock fields (two runs of the same numbers differ only there), ranks as threads
with the one collective the start-up agreement uses (an allgather), and tiny data sets
in Fashion-MNIST's on-disk format (IDX files, raw or gzipped).

The tests directory is on sys.path (tests/conftest.py puts it there, also for the tests
that run inside MPI ranks), so test files say ``from helpers import ...``.
"""
from __future__ import annotations

import gzip
import struct
import threading
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WALL_CLOCK = ("time_s",)  # the one field of a metrics record that is measured, not computed


def without_time(records) -> list[dict]:
    """Metrics records (dicts, e.g. read_jsonl of metrics.jsonl) minus their wall-clock
    fields: what must be equal, bit for bit, between back ends and between runs."""
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in records]


class ThreadAllgather:
    """n ranks as threads with an allgather among them: ``rank(r)`` is rank r's transport
    (``rank``, ``size``, ``allgather``), enough for runner.hold_agreed and the agreement
    on a refusal, without MPI."""

    def __init__(self, n: int):
        self.n, self.slots, self.barrier = n, [None] * n, threading.Barrier(n, timeout=30)

    def rank(self, r: int):
        hub = self

        class Transport:
            rank, size = r, hub.n

            def allgather(self, value):
                hub.slots[r] = value
                hub.barrier.wait()
                out = list(hub.slots)
                hub.barrier.wait()  # (nobody overwrites a slot before every rank has read)
                return out

        return Transport()


# ------------------------------------------------------------------ a factory's problem
# The source of a numpy problem that knows its training-set size and batch size (what
# --epochs needs): the nodes' mean, 2 elements. Test files write it into a module of their
# own beside the factories they test (``--problem MODULE:FUNCTION``).
MEAN_PROBLEM_SOURCE = '''
import numpy as np

class Mean:
    dim, dtype = 2, np.float64

    def __init__(self, nodes, batch_size):
        self.nodes, self.batch_size, self.n_train = nodes, batch_size, 120

    def initial(self):
        return np.zeros(2)

    def gradient(self, nodes, x, t, out=None):
        return np.subtract(x, np.asarray(nodes, np.float64)[:, None], out=out)

    def evaluate(self, x):
        return {"error": float(np.mean((x.mean(0) - 1.5) ** 2))}
'''


# ------------------------------------------------------------------ Fashion-MNIST files
def idx_bytes(arr: np.ndarray) -> bytes:
    """``arr`` as an IDX file of unsigned bytes (the MNIST/Fashion-MNIST format: magic
    0x08 type, the number of dimensions, each size big-endian, then the data)."""
    head = struct.pack(">I", 0x0800 + arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + np.ascontiguousarray(arr, dtype=np.uint8).tobytes()


def write_fashion_mnist(folder: Path, n_train: int = 60, n_test: int = 20, *, seed: int = 0,
                        gz=("train",), labels=None) -> dict:
    """The four Fashion-MNIST files flat in ``folder``, random images; the parts
    ('train', 't10k') named in ``gz`` gzipped. ``labels``: {'train': ..., 't10k': ...}
    (default random). Returns {'train': (x, y), 't10k': (x, y)}."""
    folder.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(seed)
    data = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = g.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = g.integers(0, 10, size=n, dtype=np.uint8) if labels is None else labels[prefix]
        for kind, arr in (("images-idx3-ubyte", x), ("labels-idx1-ubyte", y)):
            name = f"{prefix}-{kind}"
            if prefix in gz:
                (folder / (name + ".gz")).write_bytes(gzip.compress(idx_bytes(arr), compresslevel=1))
            else:
                (folder / name).write_bytes(idx_bytes(arr))
        data[prefix] = (x, y)
    return data


def real_fashion_mnist() -> tuple[bool, str]:
    """(whether Debian's dataset-fashion-mnist is installed, the reason to give when not):
    the tests that train on the real data set skip, saying so, where it is absent."""
    from mpi_teleport.problems import fashion_files
    from mpi_teleport.problems.datasets import FMNIST_FILES

    real = Path(fashion_files.DEBIAN_DIR)
    have = all((real / (f + ".gz")).is_file() or (real / f).is_file() for f in FMNIST_FILES)
    return have, (f"the real Fashion-MNIST is not installed in {real} "
                  f"(apt-get install dataset-fashion-mnist)")


def on_root(comm, check) -> bool:
    """check() on rank 0 of ``comm`` (where a job's files and printed lines are), its answer
    on every rank: the in-rank tests communicate first and assert after."""
    return comm.bcast(bool(check()) if comm.Get_rank() == 0 else None)
