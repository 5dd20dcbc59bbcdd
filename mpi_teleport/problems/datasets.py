"""Data sets and their split over nodes (paper Sec. 5.2, Hsu et al. 2019).

Everything returns plain numpy arrays: images ``float32 (N, C, H, W)`` normalised per
channel, labels ``int64 (N,)``. This module imports only numpy at top level; torch,
torchvision and scikit-learn are imported inside the functions that need them, so the
package (and the quadratic problem) work without them.

* :func:`load_fashion_mnist`, :func:`load_cifar10` -- the real torchvision parsers
  (``torchvision.datasets.FashionMNIST`` / ``CIFAR10`` with ``root=data_dir``). Files
  that are absent raise :class:`DatasetMissingError` with one line naming the directory,
  the files and the remedy. Integrity checks, as torchvision does them:

  - Fashion-MNIST: the four files flat in the folder (as Debian's
    ``dataset-fashion-mnist`` installs them) or in torchvision's
    ``<data_dir>/FashionMNIST/raw/``, each ``.gz`` or decompressed; ``.gz`` files are
    decompressed once into a cache, never into the data folder, which may be read-only
    (:mod:`.fashion_files`, also the search order without ``--data-dir`` and the md5 check
    of files that claim to be the official release).
  - CIFAR-10: torchvision checks the md5 of ``data_batch_1..5`` and ``test_batch``, and
    of ``batches.meta``. ``verify_md5=True`` (default) keeps these checks;
    ``verify_md5=False`` uses a subclass of ``torchvision.datasets.CIFAR10`` whose
    class-level md5 entries are ``None`` -- ``check_integrity(path, None)`` is
    torchvision's "file exists" check -- so the parsing is still torchvision's, only the
    checksum is skipped (for subsets, re-packed or test files). If only
    ``<data_dir>/cifar-10-python.tar.gz`` is present, :func:`extract_cifar10` extracts
    it first: md5 of the archive before anything else (with ``verify_md5``), then every
    member checked (plain files and folders under ``cifar-10-batches-py/`` only), then
    tarfile's ``"data"`` filter -- nothing is ever written outside ``data_dir``.

  Unpacking happens once per data directory, whatever the number of ranks: one process
  at a time (an ``flock`` on ``<data_dir>/.mpi_teleport-unpack.lock``), each file written
  under a temporary name and renamed into place, so no rank ever reads a half-written
  file; files already there are not touched (a read-only directory is fine then).

  Then the content is checked (:class:`DatasetContentError`, one line): the IDX headers
  (magic, 28 x 28, file size), as many labels as images, labels in 0..9.

* :func:`load_digits_dataset` -- scikit-learn's bundled 8x8 digits (real data, offline).
* The split over nodes (:func:`dirichlet_partition`, :func:`class_histogram`,
  :func:`check_enough_samples`, :func:`train_val_split`) lives in :mod:`.partitions`
  and is re-exported here.
"""
from __future__ import annotations

import errno
import os

import numpy as np

__all__ = [
    "DatasetMissingError",
    "DatasetContentError",
    "NotEnoughSamplesError",
    "check_enough_samples",
    "decompress_fashion_mnist",
    "fashion_mnist_root",
    "extract_cifar10",
    "FMNIST_MEAN",
    "FMNIST_STD",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "load_fashion_mnist",
    "fashion_mnist_paths",
    "load_cifar10",
    "ImageRows",
    "open_fashion_mnist",
    "open_cifar10",
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


# Seed-sequence tags: keep the different uses of one user seed apart.
_TAG_DIGITS = 0xD6


from ..errors import DatasetMissingError  # noqa: E402  (re-exported: datasets.DatasetMissingError)
from .partitions import (NotEnoughSamplesError, check_enough_samples, class_histogram,
                         dirichlet_partition, train_val_split)

from .image_rows import ImageRows, _normalise, _read_rows  # noqa: E402,F401  (re-exported)
from .unpacking import (CIFAR10_FILES, CIFAR10_TGZ_MD5, FMNIST_FILES, MAX_UNPACKED,
                        N_CLASSES, UNPACK_LOCK, DatasetContentError, _check_arrays,
                        _check_idx_pair, _idx_header, _md5, _one_line, _read, _safe_members,
                        _tmp_name, _unpack_lock, extract_cifar10)
from . import fashion_files  # noqa: E402
from .fashion_files import decompress_fashion_mnist  # noqa: E402,F401  (re-exported)


# --------------------------------------------------------------------- Fashion-MNIST
def _fetch(absent: list, download: bool, missing, what: str, fetch, data_dir: str) -> tuple[list, str]:
    """With --download, try ``fetch()`` (torchvision's download) for absent files, one
    process at a time per data directory; return the files still absent and what the user
    should do about them."""
    if absent and download:
        try:
            os.makedirs(data_dir, exist_ok=True)
            with _unpack_lock(data_dir):
                if missing():  # another process may have fetched them meanwhile
                    fetch()
        except Exception as exc:
            return missing(), f"download failed ({_one_line(exc)}); copy {what} there"
        absent = missing()
    return absent, f"rerun with --download on a machine with internet access, or copy {what} there"


def _fashion_mnist_files(data_dir, train: bool, download: bool, layout: bool = False) -> tuple:
    """Make sure the Fashion-MNIST files are there (fetching with --download), checked;
    returns (folder holding the four decompressed files, legacy) where legacy means
    torchvision's old processed .pt files are what is there (then the folder is
    ``<data_dir>/FashionMNIST/raw``). ``layout``: the folder must be torchvision's
    ``.../FashionMNIST/raw`` (a flat folder is then presented through the cache, by links).
    ``data_dir`` None: :func:`.fashion_files.default_data_dir`. Nothing is written into the
    data folder (:mod:`.fashion_files`)."""
    searched = data_dir is None
    data_dir = os.path.abspath(os.fspath(fashion_files.default_data_dir() if searched else data_dir))
    raw = os.path.join(data_dir, "FashionMNIST", "raw")
    processed = os.path.join(data_dir, "FashionMNIST", "processed")
    if all(os.path.isfile(os.path.join(processed, f)) for f in ("training.pt", "test.pt")):
        return raw, True

    def missing():
        return [f for f in FMNIST_FILES if f not in fashion_files.locate(data_dir)[1]]

    def fetch():  # (torchvision is imported only to download)
        from torchvision.datasets import FashionMNIST

        FashionMNIST(root=data_dir, train=train, download=True)

    absent, how = _fetch(missing(), download, missing, "the files", fetch, data_dir)
    if absent:
        looked = (f"looked in ./data and {fashion_files.DEBIAN_DIR} (no --data-dir given); "
                  if searched else "")
        raise DatasetMissingError(
            f"Fashion-MNIST not found: expected {{{','.join(FMNIST_FILES)}}} (each raw or .gz) "
            f"flat in {data_dir} or in {raw} (missing: {', '.join(absent)}); {looked}"
            f"apt-get install dataset-fashion-mnist puts them in {fashion_files.DEBIAN_DIR}, "
            f"or {how}")
    folder, sources = fashion_files.locate(data_dir)
    plain = all(not path.endswith(".gz") for path in sources.values())
    if not plain or (layout and folder != raw):
        folder, _ = fashion_files.decompressed_folder(folder, sources)
    prefix = "train" if train else "t10k"  # (the part asked for; the other may be damaged)
    paths = {f: os.path.join(folder, f) for f in FMNIST_FILES if f.startswith(prefix)}
    _check_idx_pair(paths[f"{prefix}-images-idx3-ubyte"], paths[f"{prefix}-labels-idx1-ubyte"])
    fashion_files.check_official(paths)
    return folder, False


def fashion_mnist_paths(data_dir=None) -> dict:
    """The four decompressed Fashion-MNIST files (name -> path) the reader uses for
    ``data_dir`` (None: the search order of :func:`.fashion_files.default_data_dir`),
    after its checks: e.g. for ``fashion_files.data_md5`` in results."""
    folder, _ = _fashion_mnist_files(data_dir, True, False)
    _fashion_mnist_files(data_dir, False, False)  # (the test part's checks too)
    return {f: os.path.join(folder, f) for f in FMNIST_FILES}


def fashion_mnist_root(data_dir=None) -> str:
    """A ``root`` for ``torchvision.datasets.FashionMNIST(root, train=..., download=False)``
    holding the four Fashion-MNIST files of ``data_dir`` (flat, as Debian's
    ``dataset-fashion-mnist`` installs them in ``/usr/share/datasets/fashion-mnist``, or
    torchvision's ``<data_dir>/FashionMNIST/raw/``; each ``.gz`` or decompressed; None: the
    search order of :func:`load_fashion_mnist`). torchvision reads only the decompressed
    files in ``<root>/FashionMNIST/raw/`` (a recompressed ``.gz`` fails its md5 and it
    would try to download): where ``data_dir`` is not that already, they are decompressed
    once into the cache (``$MPI_TELEPORT_CACHE``, default ``~/.cache/mpi_teleport``) and
    laid out there; ``data_dir`` is never written to. The files are checked first (IDX
    headers, the md5 of a file that claims to be the official release):
    :class:`DatasetMissingError` or :class:`DatasetContentError` in one line.

    >>> from torchvision import datasets, transforms                # doctest: +SKIP
    >>> from mpi_teleport.problems.datasets import fashion_mnist_root  # doctest: +SKIP
    >>> root = fashion_mnist_root("/usr/share/datasets/fashion-mnist")  # doctest: +SKIP
    >>> train = datasets.FashionMNIST(root, train=True, transform=transforms.ToTensor())
    ... # doctest: +SKIP
    """
    raw, _ = _fashion_mnist_files(data_dir, True, False, layout=True)
    _fashion_mnist_files(data_dir, False, False, layout=True)  # (the test part's checks)
    return os.path.dirname(os.path.dirname(raw))


def load_fashion_mnist(data_dir=None, train: bool = True, download: bool = False):
    """Fashion-MNIST as ``(images float32 (N,1,28,28), labels int64 (N,))``.

    Reads the four files from ``data_dir`` (flat, or torchvision's
    ``<data_dir>/FashionMNIST/raw/``; each ``.gz`` or decompressed; None: ``./data``, then
    Debian's ``/usr/share/datasets/fashion-mnist``) with
    ``torchvision.datasets.FashionMNIST``: ``.gz`` files are decompressed into the cache
    and a flat folder is presented to torchvision there, never written into
    (:mod:`.fashion_files`). ``download=True`` fetches them with torchvision (needs
    internet). Normalised with mean 0.2860, std 0.3530. Raises
    :class:`DatasetMissingError` (one line) when the files are absent and cannot be
    downloaded, or fail their checks.
    """
    raw, legacy = _fashion_mnist_files(data_dir, train, download, layout=True)
    from torchvision.datasets import FashionMNIST

    root = os.path.dirname(os.path.dirname(raw))  # torchvision reads <root>/FashionMNIST/raw
    ds = _read("Fashion-MNIST", raw, lambda: FashionMNIST(root=root, train=train, download=False),
               "replace them with good copies (--download on a machine with internet access)")
    images = ds.data.numpy()[:, None, :, :]
    labels = ds.targets.numpy().astype(np.int64, copy=False)
    _check_arrays("Fashion-MNIST", raw, images, labels, (1, 28, 28))
    return _normalise(images, FMNIST_MEAN, FMNIST_STD), np.ascontiguousarray(labels)


def open_fashion_mnist(data_dir=None, train: bool = True, download: bool = False):
    """Fashion-MNIST as ``(images, labels int64 (N,))`` without reading the images:
    ``images`` is an :class:`ImageRows` over a memory map of the uncompressed IDX file
    (rows read, and normalised as by :func:`load_fashion_mnist`, when indexed). The same
    files, checks and one-line errors as :func:`load_fashion_mnist` (the labels, small,
    are read and checked whole); torchvision's old processed files are loaded whole.
    """
    raw, legacy = _fashion_mnist_files(data_dir, train, download)
    if legacy:
        images, labels = load_fashion_mnist(data_dir, train, download)
        return images, labels
    prefix = "train" if train else "t10k"
    images_path = os.path.join(raw, f"{prefix}-images-idx3-ubyte")
    labels_path = os.path.join(raw, f"{prefix}-labels-idx1-ubyte")
    n, h, w = _idx_header(images_path, 3)

    def read():
        images = np.memmap(images_path, dtype=np.uint8, mode="r", offset=16, shape=(n, 1, h, w))
        labels = np.fromfile(labels_path, dtype=np.uint8, offset=8).astype(np.int64)
        return images, labels

    images, labels = _read("Fashion-MNIST", raw, read, "replace them with good copies")
    _check_arrays("Fashion-MNIST", raw, images, labels, (1, 28, 28))
    return ImageRows(images, FMNIST_MEAN, FMNIST_STD, file=(images_path, 16)), labels


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


def _cifar10_files(data_dir, train: bool, download: bool, verify_md5: bool) -> tuple:
    """Make sure the CIFAR-10 files are there and pass the md5 check (extracting the
    archive, fetching with --download); returns (data_dir, batches folder, reader class)."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    base = os.path.join(data_dir, "cifar-10-batches-py")
    tarball = os.path.join(data_dir, "cifar-10-python.tar.gz")

    def missing():
        return [f for f in CIFAR10_FILES if not os.path.isfile(os.path.join(base, f))]

    absent = missing()
    if absent and os.path.isfile(tarball):
        extract_cifar10(data_dir, verify_md5)
        absent = missing()

    cls = _cifar10_class(verify_md5)
    absent, how = _fetch(absent, download, missing,
                         f"the files (or cifar-10-python.tar.gz into {data_dir})",
                         lambda: cls(root=data_dir, train=train, download=True), data_dir)
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
    return data_dir, base, cls


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
    data_dir, base, cls = _cifar10_files(data_dir, train, download, verify_md5)
    ds = _read("CIFAR-10", base, lambda: cls(root=data_dir, train=train, download=False),
               "replace them with good copies")
    images = np.asarray(ds.data, dtype=np.uint8).transpose(0, 3, 1, 2)  # NHWC -> NCHW
    labels = np.asarray(ds.targets, dtype=np.int64)
    _check_arrays("CIFAR-10", base, images, labels, (3, 32, 32))
    return _normalise(images, CIFAR10_MEAN, CIFAR10_STD), labels


CIFAR10_NPY = "mpi_teleport-npy"  # folder (under cifar-10-batches-py) of the memory-mappable copy


def _cifar10_stamp(base: str) -> dict:
    """Size and modification time of each pickle: the copy is redone when they change."""
    out = {}
    for name in CIFAR10_FILES:
        st = os.stat(os.path.join(base, name))
        out[name] = [int(st.st_size), int(st.st_mtime_ns)]
    return out


def _cifar10_npy(data_dir: str, base: str, cls) -> str | None:
    """Convert the pickles once per directory into ``.npy`` files (uint8 NCHW images,
    int64 labels) that can be memory-mapped: one process at a time, each file written
    under a temporary name and renamed into place, the stamp last. Returns the folder,
    or None when the directory is not writable (then the pickles are read whole)."""
    import json

    folder = os.path.join(base, CIFAR10_NPY)
    stamp_path = os.path.join(folder, "source.json")

    def current():
        try:
            with open(stamp_path) as f:
                return json.load(f) == _cifar10_stamp(base)
        except (OSError, ValueError):
            return False

    if current():
        return folder
    try:
        with _unpack_lock(data_dir):
            if current():  # another process converted them meanwhile
                return folder
            os.makedirs(folder, exist_ok=True)
            for train, prefix in ((True, "train"), (False, "test")):
                ds = _read("CIFAR-10", base, lambda: cls(root=data_dir, train=train, download=False),
                           "replace them with good copies")
                images = np.asarray(ds.data, dtype=np.uint8).transpose(0, 3, 1, 2)  # NHWC -> NCHW
                labels = np.asarray(ds.targets, dtype=np.int64)
                _check_arrays("CIFAR-10", base, images, labels, (3, 32, 32))
                for name, arr in ((f"{prefix}-images.npy", images), (f"{prefix}-labels.npy", labels)):
                    path = os.path.join(folder, name)
                    tmp = _tmp_name(path)
                    try:
                        with open(tmp, "wb") as f:
                            np.save(f, np.ascontiguousarray(arr))
                            f.flush()
                            os.fsync(f.fileno())
                        os.replace(tmp, path)
                    finally:
                        if os.path.lexists(tmp):
                            os.unlink(tmp)
                del ds, images, labels
            tmp = _tmp_name(stamp_path)
            with open(tmp, "w") as stamp:
                json.dump(_cifar10_stamp(base), stamp)
            os.replace(tmp, stamp_path)
    except PermissionError:
        return None
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return None
        raise
    return folder


def open_cifar10(data_dir, train: bool, download: bool = False, verify_md5: bool = True):
    """CIFAR-10 as ``(images, labels int64 (N,))`` without keeping the images in memory:
    the pickles (which cannot be memory-mapped) are converted once per data directory
    into ``cifar-10-batches-py/mpi_teleport-npy/`` and ``images`` is an
    :class:`ImageRows` over a memory map of that copy (normalised as by
    :func:`load_cifar10` when indexed). Same files, checks and one-line errors as
    :func:`load_cifar10`; a read-only directory falls back to reading the pickles whole.
    """
    data_dir, base, cls = _cifar10_files(data_dir, train, download, verify_md5)
    folder = _cifar10_npy(data_dir, base, cls)
    if folder is None:
        return load_cifar10(data_dir, train, download, verify_md5)
    prefix = "train" if train else "test"

    def read():
        images = np.load(os.path.join(folder, f"{prefix}-images.npy"), mmap_mode="r")
        labels = np.load(os.path.join(folder, f"{prefix}-labels.npy"))
        return images, labels

    images, labels = _read("CIFAR-10", base, read, "delete " + folder + " to have it redone")
    _check_arrays("CIFAR-10", base, images, labels, (3, 32, 32))
    file: tuple[str, int] | None = None
    # (the .npy copy is C-ordered after its header: read through the file)
    if isinstance(images, np.memmap) and images.flags.c_contiguous:
        file = (os.path.join(folder, f"{prefix}-images.npy"), int(images.offset))
    return (ImageRows(images, CIFAR10_MEAN, CIFAR10_STD, file=file),
            labels.astype(np.int64, copy=False))


# ---------------------------------------------------------------------------- digits
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``load_digits()`` gives them, (images float64 (1797, 8, 8),
    target (1797,)): read from the file scikit-learn ships, ``datasets/data/digits.csv.gz``,
    as it reads it (``np.loadtxt``, comma-separated, the label last), without importing
    scikit-learn, whose import costs each rank of a run about a second of CPU (scipy and
    the rest). Where that file is not found, ``load_digits()`` itself."""
    import gzip
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")  # (finds the package without running it)
    folders = spec.submodule_search_locations if spec is not None else None
    for folder in folders or []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, mode="rt", encoding="utf-8") as text:
                data = np.loadtxt(text, delimiter=",")
            if data.shape == (1797, 65):
                return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images, bunch.target


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
    images, target = _digits_arrays()
    x = np.asarray(images, dtype=np.float32) / np.float32(16.0)
    y = np.asarray(target, dtype=np.int64)
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_DIGITS]))
    held = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        idx = idx[gen.permutation(len(idx))]
        held[idx[: int(round(val_fraction * len(idx)))]] = True
    keep = ~held if train else held
    return np.ascontiguousarray(x[keep][:, None, :, :]), np.ascontiguousarray(y[keep])
