"""Data sets and their split over nodes (paper Sec. 5.2, Hsu et al. 2019).

Everything returns plain numpy arrays: images ``float32 (N, C, H, W)`` normalised per
channel, labels ``int64 (N,)``. This module imports only numpy at top level; torch,
torchvision and scikit-learn are imported inside the functions that need them, so the
package (and the quadratic problem) work without them.

* :func:`load_fashion_mnist`, :func:`load_cifar10` -- the real torchvision parsers
  (``torchvision.datasets.FashionMNIST`` / ``CIFAR10`` with ``root=data_dir``). Files
  that are absent raise :class:`DatasetMissingError` with one line naming the directory,
  the files and the remedy. Integrity checks, as torchvision does them:

  - Fashion-MNIST: torchvision only checks that the four *uncompressed* IDX files exist
    under ``<data_dir>/FashionMNIST/raw/`` (no md5). When only the ``.gz`` files are
    there (copied by hand), they are decompressed next to themselves with
    ``torchvision.datasets.utils.extract_archive`` -- what torchvision's own download
    does after fetching them.
  - CIFAR-10: torchvision checks the md5 of ``data_batch_1..5`` and ``test_batch``, and
    of ``batches.meta``. ``verify_md5=True`` (default) keeps these checks;
    ``verify_md5=False`` uses a subclass of ``torchvision.datasets.CIFAR10`` whose
    class-level md5 entries are ``None`` -- ``check_integrity(path, None)`` is
    torchvision's "file exists" check -- so the parsing is still torchvision's, only the
    checksum is skipped (for subsets, re-packed or test files). If only
    ``<data_dir>/cifar-10-python.tar.gz`` is present it is extracted first.

* :func:`load_digits_dataset` -- scikit-learn's bundled 8x8 digits (real data, offline).
* :func:`dirichlet_partition`, :func:`class_histogram` -- the non-IID split.
* :func:`train_val_split` -- hold out validation samples from a training set (used to
  choose k; never the test set).
"""
from __future__ import annotations

import os

import numpy as np

__all__ = [
    "DatasetMissingError",
    "FMNIST_MEAN",
    "FMNIST_STD",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "load_fashion_mnist",
    "load_cifar10",
    "load_digits_dataset",
    "dirichlet_partition",
    "class_histogram",
    "train_val_split",
]

# Per-channel statistics of the training sets (pixel values scaled to [0, 1]).
FMNIST_MEAN = (0.2860,)
FMNIST_STD = (0.3530,)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

FMNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
CIFAR10_FILES = (
    "data_batch_1",
    "data_batch_2",
    "data_batch_3",
    "data_batch_4",
    "data_batch_5",
    "test_batch",
    "batches.meta",
)

# Seed-sequence tags: keep the different uses of one user seed apart.
_TAG_DIRICHLET = 0xD1
_TAG_VAL = 0x7A
_TAG_DIGITS = 0xD6


class DatasetMissingError(ValueError):
    """A data set's files are absent, unreadable or corrupted (message: one line)."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read(name: str, where, build, hint: str):
    """``build()`` (torchvision reading files that are present); a failure becomes one
    line naming the folder and what to do."""
    try:
        return build()
    except Exception as exc:
        raise DatasetMissingError(
            f"{name} files under {where} could not be read ({_one_line(exc)}); {hint}") from None


def _normalise(images_u8: np.ndarray, mean, std) -> np.ndarray:
    """uint8 (N, C, H, W) -> float32 (x / 255 - mean) / std per channel."""
    x = images_u8.astype(np.float32)
    x *= np.float32(1.0 / 255.0)
    m = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    x -= m
    x /= s
    return x


# --------------------------------------------------------------------- Fashion-MNIST
def _fetch(absent: list, download: bool, missing, what: str, fetch) -> tuple[list, str]:
    """With --download, try ``fetch()`` (torchvision's download) for absent files; return
    the files still absent and what the user should do about them."""
    if absent and download:
        try:
            fetch()
        except Exception as exc:
            return missing(), f"download failed ({_one_line(exc)}); copy {what} there"
        absent = missing()
    return absent, f"rerun with --download on a machine with internet access, or copy {what} there"


def load_fashion_mnist(data_dir, train: bool, download: bool = False):
    """Fashion-MNIST as ``(images float32 (N,1,28,28), labels int64 (N,))``.

    Reads ``<data_dir>/FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``
    (all four must be present, as torchvision requires; ``.gz`` versions are
    decompressed in place) with ``torchvision.datasets.FashionMNIST``. ``download=True``
    fetches them with torchvision (needs internet). Normalised with mean 0.2860, std
    0.3530. Raises :class:`DatasetMissingError` (one line) when the files are absent and
    cannot be downloaded.
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    raw = os.path.join(data_dir, "FashionMNIST", "raw")
    processed = os.path.join(data_dir, "FashionMNIST", "processed")

    def missing():
        return [f for f in FMNIST_FILES if not os.path.isfile(os.path.join(raw, f))]

    legacy = all(os.path.isfile(os.path.join(processed, f)) for f in ("training.pt", "test.pt"))
    absent = [] if legacy else missing()
    if absent:
        # Hand-copied .gz files: decompress them as torchvision's download would.
        gz = [f for f in absent if os.path.isfile(os.path.join(raw, f + ".gz"))]
        if gz:
            from torchvision.datasets.utils import extract_archive

            for f in gz:
                try:
                    extract_archive(os.path.join(raw, f + ".gz"), raw)
                except Exception as exc:  # corrupt archive, read-only dir, ...
                    raise DatasetMissingError(
                        f"Fashion-MNIST: cannot decompress {os.path.join(raw, f + '.gz')} "
                        f"({_one_line(exc)}); replace it with a good copy"
                    ) from None
            absent = missing()

    from torchvision.datasets import FashionMNIST

    absent, how = _fetch(absent, download, missing, "the files",
                         lambda: FashionMNIST(root=data_dir, train=train, download=True))
    if absent:
        raise DatasetMissingError(
            f"Fashion-MNIST not found: expected {raw}/{{{','.join(FMNIST_FILES)}}} "
            f"(each raw or .gz; missing: {', '.join(absent)}); {how}"
        )
    ds = _read("Fashion-MNIST", raw, lambda: FashionMNIST(root=data_dir, train=train, download=False),
               "replace them with good copies (--download on a machine with internet access)")
    images = ds.data.numpy()[:, None, :, :]
    labels = ds.targets.numpy().astype(np.int64, copy=False)
    return _normalise(images, FMNIST_MEAN, FMNIST_STD), np.ascontiguousarray(labels)


# -------------------------------------------------------------------------- CIFAR-10
def _cifar10_class(verify_md5: bool):
    from torchvision.datasets import CIFAR10

    if verify_md5:
        return CIFAR10

    class CIFAR10NoMD5(CIFAR10):
        """torchvision's CIFAR10 with its md5 entries set to None (existence check only)."""

        train_list = [[name, None] for name, _ in CIFAR10.train_list]
        test_list = [[name, None] for name, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    return CIFAR10NoMD5


def load_cifar10(data_dir, train: bool, download: bool = False, verify_md5: bool = True):
    """CIFAR-10 as ``(images float32 (N,3,32,32), labels int64 (N,))``.

    Reads ``<data_dir>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}``
    (the python-pickle release) with ``torchvision.datasets.CIFAR10``; extracts
    ``<data_dir>/cifar-10-python.tar.gz`` first when only the archive is there.
    ``verify_md5`` keeps torchvision's per-file md5 check (see the module docstring for
    ``False``). Normalised with mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435,
    0.2616). Raises :class:`DatasetMissingError` (one line) when files are absent,
    cannot be downloaded, or fail the md5 check.
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    base = os.path.join(data_dir, "cifar-10-batches-py")
    tarball = os.path.join(data_dir, "cifar-10-python.tar.gz")

    def missing():
        return [f for f in CIFAR10_FILES if not os.path.isfile(os.path.join(base, f))]

    absent = missing()
    if absent and os.path.isfile(tarball):
        from torchvision.datasets.utils import extract_archive

        try:
            extract_archive(tarball, data_dir)
        except Exception as exc:
            raise DatasetMissingError(
                f"CIFAR-10: cannot extract {tarball} ({_one_line(exc)}); replace it with a good copy"
            ) from None
        absent = missing()

    cls = _cifar10_class(verify_md5)
    absent, how = _fetch(absent, download, missing,
                         f"the files (or cifar-10-python.tar.gz into {data_dir})",
                         lambda: cls(root=data_dir, train=train, download=True))
    if absent:
        raise DatasetMissingError(
            f"CIFAR-10 not found: expected {base}/{{data_batch_1..5,test_batch,batches.meta}} "
            f"(python version; missing: {', '.join(absent)}); {how}"
        )
    if verify_md5:
        from torchvision.datasets.utils import check_integrity

        ref = cls.train_list + cls.test_list + [[cls.meta["filename"], cls.meta["md5"]]]
        bad = [f for f, md5 in ref if not check_integrity(os.path.join(base, f), md5)]
        if bad:
            raise DatasetMissingError(
                f"CIFAR-10 files under {base} fail torchvision's md5 check: {', '.join(bad)}; "
                "replace them with the official cifar-10-python.tar.gz contents "
                "(or load with verify_md5=False for deliberately modified files)"
            )
    ds = _read("CIFAR-10", base, lambda: cls(root=data_dir, train=train, download=False),
               "replace them with good copies")
    images = np.asarray(ds.data, dtype=np.uint8).transpose(0, 3, 1, 2)  # NHWC -> NCHW
    labels = np.asarray(ds.targets, dtype=np.int64)
    return _normalise(images, CIFAR10_MEAN, CIFAR10_STD), labels


# ---------------------------------------------------------------------------- digits
def load_digits_dataset(train: bool, val_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's bundled 8x8 digits (1797 real samples, 10 classes; offline).

    Returns ``(images float32 (N,1,8,8) in [0, 1], labels int64 (N,))``. The split is a
    fixed stratified one: in every class a seeded permutation puts
    ``round(val_fraction * n_class)`` samples into the held-out (test) part, returned for
    ``train=False``; the rest, for ``train=True``. ``val_fraction`` is that held-out
    fraction (default 20 %). The same (val_fraction, seed) gives the same split in any
    process. Indices within each part are in ascending original order. For a
    validation set (choosing k) split the training part again with
    :func:`train_val_split`.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0)
    y = np.asarray(bunch.target, dtype=np.int64)
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_DIGITS]))
    held = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        idx = idx[gen.permutation(len(idx))]
        held[idx[: int(round(val_fraction * len(idx)))]] = True
    keep = ~held if train else held
    return np.ascontiguousarray(x[keep][:, None, :, :]), np.ascontiguousarray(y[keep])


# ------------------------------------------------------------------------ partitions
def dirichlet_partition(labels, n_nodes: int, alpha: float, seed: int) -> list:
    """Split sample indices over ``n_nodes`` nodes, non-IID (Hsu et al., 2019).

    For each class c (ascending), its indices are shuffled and cut by proportions
    ``q_c ~ Dir(alpha * 1_n)``: node j gets ``floor(n_c*cumsum(q)_j) - floor(n_c*cumsum(q)_{j-1})``
    of them. Small alpha -> each node holds few classes; large alpha -> near-IID.

    Guarantees: a partition (every index exactly once), deterministic for
    ``(labels, n_nodes, alpha, seed)`` (numpy PCG64 from ``SeedSequence([seed, tag])``),
    and every node non-empty. The last is enforced deterministically: while some node is
    empty, the lowest-numbered empty node receives the largest index of the largest node
    (lowest node id on ties). Needs ``len(labels) >= n_nodes``. Returns a list of sorted
    int64 index arrays, one per node.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError("labels must be one-dimensional")
    n_nodes = int(n_nodes)
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"alpha must be a positive finite number, got {alpha}")
    if len(labels) < n_nodes:
        raise ValueError(f"cannot give {n_nodes} nodes a sample each from {len(labels)} samples")
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_DIRICHLET]))
    chunks = [[] for _ in range(n_nodes)]
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[gen.permutation(len(idx))]
        q = gen.dirichlet(np.full(n_nodes, float(alpha)))
        if not np.all(np.isfinite(q)) or q.sum() <= 0:  # underflow for tiny alpha
            q = np.zeros(n_nodes)
            q[gen.integers(n_nodes)] = 1.0
        cuts = np.floor(np.cumsum(q) * len(idx)).astype(np.int64)
        cuts = np.clip(cuts, 0, len(idx))
        cuts[-1] = len(idx)
        for j, part in enumerate(np.split(idx, cuts[:-1])):
            if len(part):
                chunks[j].append(part)
    parts = [
        np.sort(np.concatenate(ch)).astype(np.int64) if ch else np.empty(0, dtype=np.int64)
        for ch in chunks
    ]
    while True:
        sizes = np.array([len(p) for p in parts])
        empty = np.flatnonzero(sizes == 0)
        if len(empty) == 0:
            break
        donor = int(np.argmax(sizes))
        parts[int(empty[0])] = parts[donor][-1:].copy()
        parts[donor] = parts[donor][:-1]
    return parts


def class_histogram(labels, parts, n_classes: int) -> list:
    """Per-node label counts: ``hist[j][c]`` = samples of class c on node j."""
    labels = np.asarray(labels)
    return [
        np.bincount(labels[np.asarray(p, dtype=np.int64)], minlength=n_classes)[:n_classes]
        .astype(int)
        .tolist()
        for p in parts
    ]


def train_val_split(n_samples: int, val_fraction: float, seed: int):
    """Seeded split of ``range(n_samples)`` into ``(train_idx, val_idx)``.

    ``n_val = round(val_fraction * n_samples)``, at least 1 when val_fraction > 0 and at
    most ``n_samples - 1``; ``val_fraction == 0`` gives an empty validation set. Both are
    sorted int64 arrays, disjoint, covering every index; deterministic for
    (n_samples, val_fraction, seed). Use it on the training set only (for choosing k);
    the test set stays untouched.
    """
    n_samples = int(n_samples)
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n_val = int(round(val_fraction * n_samples))
    if val_fraction > 0:
        n_val = max(1, n_val)
    n_val = min(n_val, n_samples - 1)
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_VAL]))
    perm = gen.permutation(n_samples)
    return np.sort(perm[n_val:]).astype(np.int64), np.sort(perm[:n_val]).astype(np.int64)
