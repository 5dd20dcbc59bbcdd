"""A rank keeps only its node's training share and its slice of the evaluation sets
(``local_nodes=[rank]``), read from memory-mapped files in the real formats; the numbers
it computes are those of the problem holding everything."""
import gzip
import importlib.util
import os
import pickle
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                                reason="needs torchvision (the nn extra)")  # (found, not
# imported: collecting this file in each pytest worker need not load it)

from mpi_teleport.problems import datasets, network  # noqa: E402
from mpi_teleport.core.evaluation import chunk_slices  # noqa: E402

NODES = 4


def _idx(arr: np.ndarray) -> bytes:
    head = struct.pack(">I", 0x0800 + arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + np.ascontiguousarray(arr, dtype=np.uint8).tobytes()


def _fmnist(root, n_train=600, n_test=2500, gz=False):
    raw = os.path.join(root, "FashionMNIST", "raw")
    os.makedirs(raw)
    g = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        y = g.integers(0, 10, size=n, dtype=np.uint8)
        x = g.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        for kind, arr in (("images-idx3-ubyte", x), ("labels-idx1-ubyte", y)):
            data = _idx(arr)
            if gz:
                with gzip.open(os.path.join(raw, f"{prefix}-{kind}.gz"), "wb") as f:
                    f.write(data)
            else:
                with open(os.path.join(raw, f"{prefix}-{kind}"), "wb") as f:
                    f.write(data)


def _cifar(root, per_batch=40, n_test=50):
    base = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(base)
    g = np.random.default_rng(1)
    for name, n in [*((f"data_batch_{i}", per_batch) for i in range(1, 6)), ("test_batch", n_test)]:
        entry = {"batch_label": name, "labels": g.integers(0, 10, size=n).tolist(),
                 "data": g.integers(0, 256, size=(n, 3072), dtype=np.uint8),
                 "filenames": [f"{i}.png" for i in range(n)]}
        with open(os.path.join(base, name), "wb") as f:
            pickle.dump(entry, f, protocol=2)
    with open(os.path.join(base, "batches.meta"), "wb") as f:
        pickle.dump({"label_names": [str(c) for c in range(10)]}, f, protocol=2)
    return base


def test_fashion_mnist_memory_map_reads_what_the_parser_reads(tmp_path):
    _fmnist(str(tmp_path), n_train=30, n_test=20, gz=True)
    for train in (True, False):
        want_x, want_y = datasets.load_fashion_mnist(tmp_path, train)
        rows, y = datasets.open_fashion_mnist(tmp_path, train)
        assert rows.mapped and rows.nbytes == 0 and rows.shape == want_x.shape
        assert np.array_equal(y, want_y) and np.array_equal(rows[:], want_x)
        idx = np.array([5, 1, 7])
        assert np.array_equal(rows[idx], want_x[idx])  # bit for bit, row by row
        kept = rows.select(np.arange(3, 12)).keep(np.array([0, 4]))
        assert not kept.mapped and np.array_equal(kept[:], want_x[[3, 7]])


def test_a_rank_holds_its_share_and_its_evaluation_slice_only(tmp_path):
    _fmnist(str(tmp_path))
    whole = network.fashion_mnist(NODES, seed=2, data_dir=tmp_path, alpha=0.5)
    assert whole._train.x.mapped  # the simulator reads every node's rows from the file
    test_slices = chunk_slices(whole.n_test, whole.eval_batch_size, NODES)
    val_slices = chunk_slices(whole.n_validation, whole.eval_batch_size, NODES)
    x = np.stack([whole.initial() + np.float32(0.01 * i) for i in range(2)])
    full_rows = whole.evaluation_sums(whole.average(x))
    for rank in range(NODES):
        mine = network.fashion_mnist(NODES, seed=2, data_dir=tmp_path, alpha=0.5,
                                     local_nodes=[rank])
        assert [list(p) for p in mine.parts] == [list(p) for p in whole.parts]  # same split
        share = len(whole.parts[rank])
        (lo, hi), (vlo, vhi) = test_slices[rank], val_slices[rank]
        per_sample = 28 * 28 + 8  # uint8 image, int64 label
        assert mine.data_bytes() == {"train": share * per_sample, "test": (hi - lo) * per_sample,
                                     "validation": (vhi - vlo) * per_sample}
        assert not mine._train.x.mapped and not mine._sets["test"].x.mapped  # no map of the whole file
        assert mine.n_test == whole.n_test and mine.held_slice("test") == (lo, hi)
        # the same gradient as the problem holding everything, and the same chunk rows
        g = mine.gradient([rank], x[:1], t=5)
        assert np.array_equal(g, whole.gradient([rank], x[:1], t=5))
        rows = mine.evaluation_sums(whole.average(x), lo, hi)
        size = whole.eval_batch_size
        assert np.array_equal(rows, full_rows[-(-lo // size): -(-hi // size)])
        with pytest.raises(ValueError, match="not held here"):
            mine.evaluation_sums(whole.average(x), *test_slices[(rank + 1) % 3])
    whole_bytes = 600 * 0.9 * (28 * 28 + 8)  # what one problem held per node before
    assert sum(network.fashion_mnist(NODES, seed=2, data_dir=tmp_path, alpha=0.5,
                                     local_nodes=[r]).data_bytes()["train"]
               for r in range(NODES)) == pytest.approx(whole_bytes, abs=1)


def test_cifar10_is_converted_once_and_memory_mapped(tmp_path):
    base = _cifar(str(tmp_path))
    for train in (True, False):
        want_x, want_y = datasets.load_cifar10(tmp_path, train, verify_md5=False)
        rows, y = datasets.open_cifar10(tmp_path, train, verify_md5=False)
        assert rows.mapped and np.array_equal(y, want_y) and np.array_equal(rows[:], want_x)
    folder = os.path.join(base, datasets.CIFAR10_NPY)
    stamp = os.stat(os.path.join(folder, "train-images.npy")).st_mtime_ns
    datasets.open_cifar10(tmp_path, True, verify_md5=False)  # done already: not redone
    assert os.stat(os.path.join(folder, "train-images.npy")).st_mtime_ns == stamp
    assert not [f for f in os.listdir(folder) if f.endswith(".tmp")]


def test_kept_rows_read_through_the_file_equal_the_memory_map_rows(tmp_path):
    """ImageRows.keep reads a rank's rows through the file in blocks (the memory map's
    pages would count in the rank's resident memory): the same rows, in the order asked,
    for scattered, unsorted and repeated positions and blocks smaller than a row."""
    _fmnist(str(tmp_path))
    images, _ = datasets.open_fashion_mnist(tmp_path, True)
    assert images.file is not None
    pos = np.array([599, 3, 3, 250, 0, 17, 598, 251], dtype=np.int64)
    want = images[pos]
    assert np.array_equal(images.keep(pos)[np.arange(len(pos))], want)
    narrowed = images.select(np.arange(600)[::-1])  # kept rows go through the narrowing
    assert np.array_equal(narrowed.keep(slice(1, 5))[np.arange(4)], images[[598, 597, 596, 595]])
    for block in (1, 784 * 3, 1 << 22):
        raw = datasets._read_rows(*images.file, images.raw.shape, pos, block_bytes=block)
        assert np.array_equal(raw, images.raw[pos])
    assert datasets._read_rows(*images.file, images.raw.shape, pos[:0]).shape == (0, 1, 28, 28)
