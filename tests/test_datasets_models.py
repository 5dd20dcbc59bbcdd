"""Data sets, non-IID partition, models and the flat state (mpi_teleport.problems)."""
from __future__ import annotations

import gzip
import os
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

from mpi_teleport.problems.datasets import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    FMNIST_MEAN,
    FMNIST_STD,
    DatasetMissingError,
    class_histogram,
    dirichlet_partition,
    load_cifar10,
    load_digits_dataset,
    load_fashion_mnist,
    train_val_split,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------- Dirichlet partition
def _labels(n_classes=10, per_class=200, seed=0):
    y = np.repeat(np.arange(n_classes), per_class)
    return y[np.random.default_rng(seed).permutation(len(y))]


def _mean_entropy(labels, parts, n_classes):
    ent = []
    for h in class_histogram(labels, parts, n_classes):
        q = np.asarray(h, dtype=float) / sum(h)
        q = q[q > 0]
        ent.append(-np.sum(q * np.log(q)))
    return float(np.mean(ent))


@pytest.mark.parametrize("alpha", [0.01, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("n_nodes", [1, 7, 25])
def test_dirichlet_is_partition_nonempty(alpha, n_nodes):
    y = _labels()
    parts = dirichlet_partition(y, n_nodes, alpha, seed=3)
    assert len(parts) == n_nodes
    allidx = np.concatenate(parts)
    assert len(allidx) == len(y)
    assert np.array_equal(np.sort(allidx), np.arange(len(y)))  # every sample exactly once
    assert all(len(p) >= 1 for p in parts)
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    hist = class_histogram(y, parts, 10)
    assert [sum(h) for h in hist] == [len(p) for p in parts]
    assert np.array_equal(np.sum(hist, axis=0), np.bincount(y))


def test_dirichlet_nonempty_when_tight():
    # as many nodes as samples, tiny alpha: only the fix-up can make every node non-empty
    y = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    for seed in range(20):
        parts = dirichlet_partition(y, 8, 0.01, seed)
        assert sorted(len(p) for p in parts) == [1] * 8
    with pytest.raises(ValueError):
        dirichlet_partition(y, 9, 1.0, 0)
    with pytest.raises(ValueError):
        dirichlet_partition(y, 2, 0.0, 0)


def test_dirichlet_deterministic_and_seeded():
    y = _labels()
    a = dirichlet_partition(y, 10, 0.5, seed=11)
    b = dirichlet_partition(y.copy(), 10, 0.5, seed=11)
    c = dirichlet_partition(y, 10, 0.5, seed=12)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c))


def test_dirichlet_skew_grows_as_alpha_shrinks():
    y = _labels()
    low = np.mean([_mean_entropy(y, dirichlet_partition(y, 25, 0.1, s), 10) for s in range(5)])
    high = np.mean([_mean_entropy(y, dirichlet_partition(y, 25, 10.0, s), 10) for s in range(5)])
    assert low < 1.0 < high  # log(10) = 2.30 is perfectly balanced
    assert low + 1.0 < high


def test_train_val_split():
    tr, va = train_val_split(1000, 0.1, seed=5)
    assert len(va) == 100 and len(tr) == 900
    assert np.array_equal(np.sort(np.concatenate([tr, va])), np.arange(1000))
    tr2, va2 = train_val_split(1000, 0.1, seed=5)
    assert np.array_equal(tr, tr2) and np.array_equal(va, va2)
    assert not np.array_equal(va, train_val_split(1000, 0.1, seed=6)[1])
    assert len(train_val_split(10, 0.0, 0)[1]) == 0
    assert len(train_val_split(10, 0.01, 0)[1]) == 1


# ------------------------------------------------------------------- file formats
def _idx(arr: np.ndarray) -> bytes:
    """IDX (LeCun) big-endian unsigned-byte file: magic 0x0000 08 <ndim>, dims, data."""
    head = struct.pack(">I", 0x0800 + arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + np.ascontiguousarray(arr, dtype=np.uint8).tobytes()


def _write_fmnist(root, n_train=12, n_test=5, gz_train=True):
    raw = os.path.join(root, "FashionMNIST", "raw")
    os.makedirs(raw)
    g = np.random.default_rng(0)
    data = {}
    for prefix, n, gz in (("train", n_train, gz_train), ("t10k", n_test, False)):
        x = g.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = g.integers(0, 10, size=n, dtype=np.uint8)
        for kind, arr in (("images-idx3-ubyte", x), ("labels-idx1-ubyte", y)):
            path = os.path.join(raw, f"{prefix}-{kind}")
            if gz:
                with gzip.open(path + ".gz", "wb") as f:
                    f.write(_idx(arr))
            else:
                with open(path, "wb") as f:
                    f.write(_idx(arr))
        data[prefix] = (x, y)
    return data


def _write_cifar(root, per_batch=3, n_test=4):
    base = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(base)
    g = np.random.default_rng(1)
    xs, ys = [], []

    def dump(name, n):
        x = g.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)  # rows: R, G, B planes
        y = g.integers(0, 10, size=n).tolist()
        entry = {"batch_label": name, "labels": y, "data": x, "filenames": [f"{i}.png" for i in range(n)]}
        with open(os.path.join(base, name), "wb") as f:
            pickle.dump(entry, f, protocol=2)
        return x, y

    for i in range(1, 6):
        x, y = dump(f"data_batch_{i}", per_batch)
        xs.append(x)
        ys += y
    xt, yt = dump("test_batch", n_test)
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                            "horse", "ship", "truck"], "num_cases_per_batch": per_batch,
            "num_vis": 3072}
    with open(os.path.join(base, "batches.meta"), "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return (np.concatenate(xs), np.array(ys)), (xt, np.array(yt))


def test_fashion_mnist_reads_real_format(tmp_path):
    pytest.importorskip("torchvision")
    data = _write_fmnist(str(tmp_path))
    for train, prefix in ((True, "train"), (False, "t10k")):
        x, y = load_fashion_mnist(tmp_path, train=train)
        raw_x, raw_y = data[prefix]
        assert x.dtype == np.float32 and x.shape == (len(raw_y), 1, 28, 28)
        assert y.dtype == np.int64 and np.array_equal(y, raw_y)
        expect = (raw_x[:, None].astype(np.float32) / 255 - FMNIST_MEAN[0]) / FMNIST_STD[0]
        np.testing.assert_allclose(x, expect, rtol=1e-6, atol=1e-6)
    # the .gz files were decompressed into the cache, not into the data folder
    assert not (tmp_path / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").exists()


def test_fashion_mnist_missing_names_files(tmp_path):
    with pytest.raises(DatasetMissingError) as e:
        load_fashion_mnist(tmp_path / "nowhere", train=True)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in msg
    assert str(tmp_path / "nowhere" / "FashionMNIST" / "raw") in msg and "flat in" in msg
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", ".gz", "--download"):
        assert name in msg
    # a partial copy is reported by what is missing
    pytest.importorskip("torchvision")
    _write_fmnist(str(tmp_path / "part"), gz_train=False)
    os.remove(tmp_path / "part" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte")
    with pytest.raises(DatasetMissingError, match="missing: t10k-labels-idx1-ubyte"):
        load_fashion_mnist(tmp_path / "part", train=True)


def test_cifar10_reads_real_format(tmp_path):
    pytest.importorskip("torchvision")
    (xtr, ytr), (xte, yte) = _write_cifar(str(tmp_path))
    for train, raw_x, raw_y in ((True, xtr, ytr), (False, xte, yte)):
        x, y = load_cifar10(tmp_path, train=train, verify_md5=False)
        assert x.dtype == np.float32 and x.shape == (len(raw_y), 3, 32, 32)
        assert y.dtype == np.int64 and np.array_equal(y, raw_y)
        planes = raw_x.reshape(-1, 3, 32, 32).astype(np.float32) / 255
        mean = np.array(CIFAR10_MEAN, dtype=np.float32).reshape(1, 3, 1, 1)
        std = np.array(CIFAR10_STD, dtype=np.float32).reshape(1, 3, 1, 1)
        np.testing.assert_allclose(x, (planes - mean) / std, rtol=1e-6, atol=1e-6)
    # torchvision's md5 check stays on by default: home-made files fail it, in one line
    with pytest.raises(DatasetMissingError) as e:
        load_cifar10(tmp_path, train=True)
    assert "md5" in str(e.value) and "data_batch_1" in str(e.value) and "\n" not in str(e.value)


def test_unreadable_files_are_one_line_errors(tmp_path):
    """Files that are present but damaged: one line naming the folder and what to do."""
    pytest.importorskip("torchvision")
    _write_fmnist(str(tmp_path), gz_train=False)
    raw = tmp_path / "FashionMNIST" / "raw"
    (raw / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03 truncated")
    with pytest.raises(DatasetMissingError) as e:
        load_fashion_mnist(tmp_path, train=True)
    msg = str(e.value)
    assert "could not be read" in msg and str(raw) in msg and "good copies" in msg
    assert "\n" not in msg
    _write_cifar(str(tmp_path))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DatasetMissingError) as e:
        load_cifar10(tmp_path, train=True, verify_md5=False)
    msg = str(e.value)
    assert "CIFAR-10 files under" in msg and "could not be read" in msg and "\n" not in msg


def test_cifar10_missing_names_files(tmp_path):
    with pytest.raises(DatasetMissingError) as e:
        load_cifar10(tmp_path, train=False)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "cifar-10-batches-py") in msg
    for name in ("data_batch_1..5", "test_batch", "batches.meta", "--download"):
        assert name in msg


def test_digits_offline_split():
    pytest.importorskip("sklearn")
    xtr, ytr = load_digits_dataset(train=True, seed=0)
    xte, yte = load_digits_dataset(train=False, seed=0)
    assert xtr.dtype == np.float32 and xtr.shape[1:] == (1, 8, 8) and ytr.dtype == np.int64
    assert len(ytr) + len(yte) == 1797 and abs(len(yte) - 0.2 * 1797) <= 10
    assert 0.0 <= xtr.min() and xtr.max() <= 1.0
    assert set(np.unique(yte)) == set(range(10))  # stratified
    xtr2, _ = load_digits_dataset(train=True, seed=0)
    assert np.array_equal(xtr, xtr2)
    # disjoint: no test image appears in the training part
    tr_rows = {r.tobytes() for r in xtr.reshape(len(xtr), -1)}
    dup = sum(r.tobytes() in tr_rows for r in xte.reshape(len(xte), -1))
    assert dup <= 2  # the raw data set itself holds a couple of identical images


def test_datasets_module_imports_without_torch():
    code = (
        "import sys; import mpi_teleport.problems.datasets as d; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'sklearn')]"
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env, timeout=60)


# -------------------------------------------------------------------------- models
def test_build_model_same_seed_identical():
    torch = pytest.importorskip("torch")
    from mpi_teleport.problems.models import FlatState, build_model

    state = torch.random.get_rng_state()
    for name in ("digits-cnn", "lenet5", "vgg11"):
        a, b, c = FlatState(build_model(name, 7)), FlatState(build_model(name, 7)), FlatState(build_model(name, 8))
        assert np.array_equal(a.vector, b.vector)
        assert not np.array_equal(a.params, c.params)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    # and in a fresh process (different thread count, nothing imported before)
    code = (
        "import torch, hashlib; torch.set_num_threads(2); "
        "from mpi_teleport.problems.models import build_model, FlatState; "
        "print(hashlib.sha256(FlatState(build_model('lenet5', 7)).vector.tobytes()).hexdigest())"
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120).stdout.strip()
    import hashlib

    assert out == hashlib.sha256(FlatState(build_model("lenet5", 7)).vector.tobytes()).hexdigest()
    with pytest.raises(ValueError):
        build_model("resnet", 0)


def test_model_shapes():
    torch = pytest.importorskip("torch")
    from mpi_teleport.problems.models import build_model

    for name, shape in (("digits", (1, 8, 8)), ("lenet", (1, 28, 28)), ("vgg11", (3, 32, 32))):
        m = build_model(name, 0)
        assert m.input_shape == shape
        assert tuple(m(torch.zeros((2,) + shape)).shape) == (2, 10)
    vgg = build_model("vgg11", 0)
    assert not any(isinstance(x, torch.nn.modules.batchnorm._BatchNorm) for x in vgg.modules())
    assert any(isinstance(x, torch.nn.GroupNorm) for x in vgg.modules())


def test_flat_state_round_trip():
    torch = pytest.importorskip("torch")
    from mpi_teleport.problems.models import FlatState, build_model, loss_and_grad

    m = build_model("lenet5", 0)
    before = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    flat = FlatState(m)
    assert flat.vector.dtype == np.float32 and flat.vector.flags.c_contiguous
    assert flat.size == flat.vector.size == flat.n_params + flat.n_buffers
    assert flat.n_params == sum(p.numel() for p in m.parameters()) == 61706
    assert np.array_equal(flat.params, before)
    assert np.shares_memory(flat.params_and_buffers, flat.vector)
    assert flat.check()
    # parameters live in the buffer: torch sees numpy writes, numpy sees torch writes
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32))
    out0 = m(x).detach().clone()
    flat.params_and_buffers *= 0.5
    assert not torch.equal(out0, m(x))
    flat.params_and_buffers *= 2.0
    assert torch.equal(out0, m(x))
    with torch.no_grad():
        m.fc3.bias.add_(1.0)
    assert np.array_equal(flat.params[-10:], before[-10:] + np.float32(1.0))
    with torch.no_grad():
        m.fc3.bias.copy_(torch.from_numpy(before[-10:]))
    assert torch.equal(out0, m(x))
    # gradients pack in parameter order into the flat grad buffer
    y = np.array([0, 1, 2, 3])
    loss = loss_and_grad(flat, x.numpy(), y)
    assert np.isfinite(loss)
    g = flat.grad_vector()
    ref = np.concatenate([p.grad.numpy().ravel() for p in m.parameters()])
    assert np.array_equal(g, ref) and g.any()
    # a grad replaced behind our back (set_to_none) is still handled
    m.zero_grad(set_to_none=True)
    assert not flat.grad_vector().any()
    assert flat.check()
    # buffers (BatchNorm here, just to exercise them) live in the vector too
    bn = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    fb = FlatState(bn)
    assert fb.n_buffers == 4  # running mean/var; num_batches_tracked is an integer
    fb.buffers[:] = 7.0
    assert torch.all(bn[1].running_mean == 7.0)
    assert fb.check()


def test_local_step_is_heavy_ball_in_the_token_dtype():
    """The runtime's step (every problem, simulator and MPI alike): v = mu v + g,
    y = x - lr v, element-wise in float32 for network tokens."""
    from mpi_teleport.core.algorithms import local_step

    class FixedGradient:
        def __init__(self, g):
            self.g = g

        def gradient(self, nodes, x, t, out=None):
            out[...] = self.g
            return out

    gen = np.random.default_rng(0)
    g = gen.standard_normal((2, 50)).astype(np.float32)
    x = gen.standard_normal((2, 50)).astype(np.float32)
    v, y = np.zeros_like(x), np.empty_like(x)
    v_ref, x_ref = np.zeros_like(x), x.copy()
    for t in range(3):
        y = local_step(FixedGradient(g), [0, 1], x, v, t, 0.1, 0.9, out=y)
        v_ref = np.float32(0.9) * v_ref + g
        assert y.dtype == np.float32 and np.array_equal(v, v_ref)
        assert np.array_equal(y, x_ref - np.float32(0.1) * v_ref)
        x, x_ref, y = y.copy(), y.copy(), np.empty_like(x)


def test_digits_cnn_learns_and_is_reproducible():
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from mpi_teleport.core.algorithms import local_step
    from mpi_teleport.problems.models import (FlatState, build_model, configure_torch_threads,
                                              evaluate, loss_and_grad)

    class FlatGradient:  # the gradient of the model at the token x, as problems give it
        def __init__(self, flat, batches):
            self.flat, self.batches = flat, batches

        def gradient(self, nodes, x, t, out=None):
            np.copyto(self.flat.params_and_buffers, x[0])
            b = self.batches[t]
            loss_and_grad(self.flat, xtr[b], ytr[b])
            out[0] = self.flat.grad
            return out

    configure_torch_threads(1)
    xtr, ytr = load_digits_dataset(True)
    xte, yte = load_digits_dataset(False)

    def train():
        flat = FlatState(build_model("digits-cnn", 0))
        g = np.random.default_rng(0)
        problem = FlatGradient(flat, [g.integers(0, len(ytr), 32) for _ in range(300)])
        x = flat.vector[None].copy()
        v, y = np.zeros_like(x), np.empty_like(x)
        for t in range(300):
            local_step(problem, [0], x, v, t, 0.05, 0.9, out=y)
            x, y = y, x
        np.copyto(flat.params_and_buffers, x[0])
        return flat

    a, b = train(), train()
    assert np.array_equal(a.vector, b.vector)
    assert evaluate(a.model, xte, yte)["accuracy"] > 0.85


def test_download_failure_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("torchvision")
    import torchvision.datasets as tvd
    from urllib.error import URLError

    def offline(self):
        raise URLError("no route to host\nsecond line")

    monkeypatch.setattr(tvd.FashionMNIST, "download", offline)
    monkeypatch.setattr(tvd.CIFAR10, "download", offline)
    for loader in (load_fashion_mnist, load_cifar10):
        with pytest.raises(DatasetMissingError) as e:
            loader(tmp_path, train=True, download=True)
        msg = str(e.value)
        assert "download failed" in msg and "no route to host second line" in msg and "\n" not in msg


def test_torch_set_up_asks_for_deterministic_algorithms_without_loading_the_compiler():
    """configure_torch_threads: one intra-op thread and deterministic algorithms
    (warn-only), without importing torch._inductor (sympy, triton: ~150 MB per rank)."""
    pytest.importorskip("torch")
    code = ("import sys, torch\n"
            "from mpi_teleport.problems.models import configure_torch_threads\n"
            "configure_torch_threads(1)\n"
            "assert torch.get_num_threads() == 1\n"
            "assert torch.are_deterministic_algorithms_enabled()\n"
            "assert torch.is_deterministic_algorithms_warn_only_enabled()\n"
            "assert 'torch._inductor.config' not in sys.modules, 'inductor imported'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr[-2000:]


def test_digits_are_read_from_scikit_learns_file_without_importing_it(monkeypatch):
    """The digits problem's data, read from the file scikit-learn ships, as load_digits()
    gives them (bit for bit), with scikit-learn left unimported (its import cost each rank
    of a digits run about a second of CPU); without the file, load_digits() itself."""
    pytest.importorskip("sklearn")
    import importlib.util

    from sklearn.datasets import load_digits

    from mpi_teleport.problems import datasets

    want = load_digits()
    images, target = datasets._digits_arrays()
    assert images.dtype == want.images.dtype and images.tobytes() == want.images.tobytes()
    assert target.dtype == want.target.dtype and np.array_equal(target, want.target)
    code = ("import sys; from mpi_teleport.problems import datasets; datasets.load_digits_dataset(True); "
            "print('sklearn' in sys.modules)")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=ROOT)
    assert fresh.stdout.strip() == "False", fresh.stderr
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no file found
    images, target = datasets._digits_arrays()
    assert images.tobytes() == want.images.tobytes() and np.array_equal(target, want.target)
