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
    there (copied by hand), :func:`decompress_fashion_mnist` decompresses them next to
    themselves -- what torchvision's own download does after fetching them.
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
import gzip
import hashlib
import os
import shutil
import socket
import tarfile
import tempfile
import zlib

import numpy as np

from .. import lock

__all__ = [
    "DatasetMissingError",
    "DatasetContentError",
    "NotEnoughSamplesError",
    "check_enough_samples",
    "decompress_fashion_mnist",
    "extract_cifar10",
    "FMNIST_MEAN",
    "FMNIST_STD",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "load_fashion_mnist",
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
_TAG_DIGITS = 0xD6


from ..errors import DatasetMissingError  # noqa: E402  (re-exported: datasets.DatasetMissingError)
from .partitions import (NotEnoughSamplesError, check_enough_samples,  # noqa: E402,F401
                         class_histogram, dirichlet_partition, train_val_split)


class DatasetContentError(DatasetMissingError):
    """A data set's files are there but disagree with their format or with each other
    (labels out of range, a label count other than the image count, a wrong header or
    shape, an archive that would write outside the data directory)."""


# Files are unpacked once per directory: under this lock file, into temporary names that
# os.replace puts in place, so a reader sees a file whole or not at all.
UNPACK_LOCK = ".mpi_teleport-unpack.lock"
MAX_UNPACKED = 1 << 30  # bytes; the real files are far smaller (47 MB, 178 MB in all)
CIFAR10_TGZ_MD5 = "c58f30108f718f92721af3b95e74349a"  # the official cifar-10-python.tar.gz
N_CLASSES = 10


def _tmp_name(path: str) -> str:
    return f"{path}.{socket.gethostname()}.{os.getpid()}.tmp"


def _unpack_lock(data_dir: str):
    return lock.exclusive(os.path.join(data_dir, UNPACK_LOCK))


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


class ImageRows:
    """Normalised float32 images ``(N, C, H, W)``, read from uint8 storage when indexed.

    The storage is a memory map of the data set's file (nothing read until asked) or an
    in-memory uint8 copy of some rows. Indexing (an int, a slice or an index array)
    returns the rows normalised as :func:`_normalise` does the whole set, element by
    element the same numbers. :meth:`select` narrows the rows without reading anything;
    :meth:`keep` copies the selected rows into memory (uint8, a quarter of float32) and
    drops the reference to the file: what a rank keeps of a set it needs only part of.
    ``file=(path, offset)``: where ``raw``'s rows lie in a file (C order, from
    ``offset``); :meth:`keep` then reads them through the file in bounded blocks instead
    of the memory map (the pages a memory map touches count in the process's resident
    memory while it is mapped: a share scattered over the whole file touches all of it).
    """

    dtype = np.dtype(np.float32)
    ndim = 4

    def __init__(self, raw: np.ndarray, mean, std, index: np.ndarray | None = None,
                 file: tuple | None = None):
        self.raw, self.mean, self.std = raw, tuple(mean), tuple(std)
        self.index = None if index is None else np.asarray(index, dtype=np.int64)
        self.file = file

    def __len__(self) -> int:
        return len(self.raw) if self.index is None else len(self.index)

    @property
    def shape(self) -> tuple:
        return (len(self), *self.raw.shape[1:])

    def _positions(self, idx):
        if self.index is None:
            return idx
        return self.index[idx]

    def __getitem__(self, idx) -> np.ndarray:
        rows = self.raw[self._positions(idx)]
        single = rows.ndim == self.raw.ndim - 1
        out = _normalise(rows[None] if single else rows, self.mean, self.std)
        return out[0] if single else out

    def select(self, idx) -> "ImageRows":
        """These rows (an index array or a slice of this set), nothing read."""
        if isinstance(idx, slice):
            idx = np.arange(len(self))[idx]
        return ImageRows(self.raw, self.mean, self.std, self._positions(np.asarray(idx, np.int64)),
                         self.file)

    def keep(self, idx) -> "ImageRows":
        """These rows copied into memory (uint8); the file is no longer referenced."""
        if isinstance(idx, slice):
            idx = np.arange(len(self))[idx]
        positions = self._positions(np.asarray(idx, np.int64))
        if self.file is not None:
            return ImageRows(_read_rows(*self.file, self.raw.shape, positions), self.mean, self.std)
        return ImageRows(np.array(self.raw[positions], dtype=np.uint8), self.mean, self.std)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (a memory map's are the file's, not counted)."""
        held = 0 if isinstance(self.raw, np.memmap) or isinstance(self.raw.base, np.memmap) \
            else self.raw.nbytes
        return held + (0 if self.index is None else self.index.nbytes)

    @property
    def mapped(self) -> bool:
        """Whether the rows are read from a file (a memory map)."""
        return isinstance(self.raw, np.memmap) or isinstance(self.raw.base, np.memmap)


def _read_rows(path: str, offset: int, shape: tuple, positions: np.ndarray,
               block_bytes: int = 1 << 22) -> np.ndarray:
    """Rows ``positions`` (any order) of a uint8 array of ``shape`` stored in C order from
    byte ``offset`` of ``path``, read in blocks of about ``block_bytes`` (blocks holding
    none of the rows are skipped), so no more than a block is held besides the result."""
    row_shape = tuple(shape[1:])
    row_bytes = int(np.prod(row_shape, dtype=np.int64))
    out = np.empty((len(positions), *row_shape), np.uint8)
    if len(positions) == 0:
        return out
    order = np.argsort(positions, kind="stable")
    wanted = positions[order]
    per_block = max(1, block_bytes // max(row_bytes, 1))
    buf = np.empty((per_block, row_bytes), np.uint8)
    flat = out.reshape(len(positions), row_bytes)
    with open(path, "rb") as f:
        i = 0
        while i < len(wanted):
            first = int(wanted[i])
            stop = min(first + per_block, int(shape[0]))
            j = int(np.searchsorted(wanted, stop, side="left"))
            f.seek(offset + first * row_bytes)
            got = f.readinto(memoryview(buf)[:(stop - first)].cast("B"))
            if got != (stop - first) * row_bytes:
                raise OSError(f"{path}: short read ({got} of {(stop - first) * row_bytes} bytes)")
            flat[order[i:j]] = buf[wanted[i:j] - first]
            i = j
    return out


# ------------------------------------------------------------------- consistency
def _check_arrays(name: str, where: str, images: np.ndarray, labels: np.ndarray, shape) -> None:
    """Images ``(N, *shape)`` with exactly N labels, each in 0..9; else one line."""
    if images.ndim != 1 + len(shape) or tuple(images.shape[1:]) != tuple(shape):
        raise DatasetContentError(
            f"{name} files under {where} hold images of shape {tuple(images.shape[1:])}, expected "
            f"{tuple(shape)}; replace them with good copies")
    if len(labels) != len(images):
        raise DatasetContentError(
            f"{name} files under {where} hold {len(labels)} labels for {len(images)} images; "
            "replace them with good copies")
    if len(labels) == 0:
        raise DatasetContentError(f"{name} files under {where} hold no samples; replace them with good copies")
    bad = np.flatnonzero((labels < 0) | (labels >= N_CLASSES))
    if len(bad):
        raise DatasetContentError(
            f"{name} files under {where}: label {int(labels[bad[0]])} of sample {int(bad[0])} is "
            f"outside 0..{N_CLASSES - 1} ({len(bad)} such labels); replace them with good copies")


def _idx_header(path: str, ndim: int) -> tuple:
    """The dimensions in an IDX file of unsigned bytes (magic 0x0000 08 <ndim>), after
    checking its magic and that its size is the header's plus one byte per element."""
    def refuse(why):
        raise DatasetContentError(
            f"Fashion-MNIST files under {os.path.dirname(path)} could not be read "
            f"({os.path.basename(path)} {why}); replace them with good copies")

    try:
        with open(path, "rb") as f:
            head = f.read(4 + 4 * ndim)
        size = os.path.getsize(path)
    except OSError as exc:
        refuse(f"cannot be opened: {exc.strerror}")
    want = 0x0800 + ndim
    if len(head) < 4 + 4 * ndim:
        refuse(f"is too short for an IDX header: {size} bytes")
    magic = int.from_bytes(head[:4], "big")
    if magic != want:
        refuse(f"has magic 0x{magic:08x}, expected 0x{want:08x} (unsigned bytes in {ndim} "
               f"dimension{'s' if ndim > 1 else ''})")
    dims = tuple(int.from_bytes(head[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expect = 4 + 4 * ndim + int(np.prod(dims, dtype=np.int64))
    if size != expect:
        refuse(f"holds {size} bytes, but its header ({' x '.join(map(str, dims))}) says {expect}")
    return dims


def _check_idx_pair(images_path: str, labels_path: str) -> None:
    """An images file (N, 28, 28) and a labels file (N,) that agree on N."""
    dims = _idx_header(images_path, 3)
    where = os.path.dirname(images_path)
    if dims[1:] != (28, 28):
        raise DatasetContentError(
            f"Fashion-MNIST files under {where}: {os.path.basename(images_path)} holds {dims[1]} x "
            f"{dims[2]} images, expected 28 x 28; replace them with good copies")
    (n_labels,) = _idx_header(labels_path, 1)
    if n_labels != dims[0]:
        raise DatasetContentError(
            f"Fashion-MNIST files under {where} hold {n_labels} labels for {dims[0]} images "
            f"({os.path.basename(labels_path)}, {os.path.basename(images_path)}); replace them "
            "with good copies")


# --------------------------------------------------------------------- unpacking
def decompress_fashion_mnist(data_dir) -> list:
    """Decompress ``<data_dir>/FashionMNIST/raw/*.gz`` whose uncompressed file is absent,
    once: one process at a time per directory (a lock file), each file written under a
    temporary name and renamed into place, so that concurrent readers (the other ranks of
    a node) see it whole or not at all. Returns the files this call wrote."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    raw = os.path.join(data_dir, "FashionMNIST", "raw")

    def todo():
        return [f for f in FMNIST_FILES if not os.path.isfile(os.path.join(raw, f))
                and os.path.isfile(os.path.join(raw, f + ".gz"))]

    if not todo():  # nothing to do: no lock taken (the directory may be read-only)
        return []
    done, current = [], None
    try:
        with _unpack_lock(data_dir):
            for f in todo():  # again: what another process did meanwhile is skipped
                current = os.path.join(raw, f + ".gz")
                _gunzip(current, os.path.join(raw, f))
                done.append(f)
    except DatasetMissingError:
        raise
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        if current is None:  # the lock file: the directory is not writable
            raise DatasetMissingError(
                f"Fashion-MNIST: cannot decompress the .gz files under {raw}: {data_dir} is not "
                f"writable ({_one_line(exc)}); decompress them there by hand (gunzip -k) or "
                "give a writable --data-dir") from None
        raise DatasetMissingError(
            f"Fashion-MNIST: cannot decompress {current} ({_one_line(exc)}); replace it with a "
            "good copy, or decompress it by hand (gunzip -k)") from None
    return done


def _gunzip(src: str, dst: str) -> None:
    tmp = _tmp_name(dst)
    try:
        with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
            while chunk := fin.read(1 << 20):
                if fout.tell() + len(chunk) > MAX_UNPACKED:
                    raise DatasetContentError(
                        f"Fashion-MNIST: {src} decompresses to more than {MAX_UNPACKED >> 20} MiB, "
                        "far more than the real file; replace it with a good copy")
                fout.write(chunk)
            fout.flush()
            os.fsync(fout.fileno())
        os.replace(tmp, dst)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _md5(path: str) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _safe_members(tar: tarfile.TarFile, tarball: str, data_dir: str) -> list:
    """Every member of a CIFAR-10 archive, after checking that each is a plain file or a
    folder under ``cifar-10-batches-py/`` (no absolute path, no ``..``, no link, no device)
    and that the whole unpacks to a plausible size; else one line, nothing extracted."""
    def refuse(member, why):
        raise DatasetContentError(
            f"CIFAR-10: refusing to extract {tarball}: member {member.name!r} {why}; nothing was "
            f"extracted; replace it with the official cifar-10-python.tar.gz")

    members, total = tar.getmembers(), 0
    for m in members:
        if not (m.isfile() or m.isdir()):
            kind = ("is a symbolic link" if m.issym() else "is a hard link" if m.islnk()
                    else "is a device, FIFO or other special file")
            refuse(m, kind)
        if m.name.startswith(("/", "\\")) or os.path.isabs(m.name):
            refuse(m, f"has an absolute path (it would be written outside {data_dir})")
        parts = [p for p in m.name.replace("\\", "/").split("/") if p not in ("", ".")]
        if ".." in parts:
            refuse(m, f"has a '..' component (it would be written outside {data_dir})")
        if not parts or parts[0] != "cifar-10-batches-py":
            refuse(m, "is not under cifar-10-batches-py/")
        total += max(int(m.size), 0)
        if total > MAX_UNPACKED:
            refuse(m, f"takes the archive past {MAX_UNPACKED >> 20} MiB unpacked, far more than CIFAR-10")
    return members


def extract_cifar10(data_dir, verify_md5: bool = True) -> list:
    """Extract ``<data_dir>/cifar-10-python.tar.gz`` into ``<data_dir>/cifar-10-batches-py``,
    once, and never outside ``data_dir``: the archive's md5 is checked first (unless
    ``verify_md5=False``), every member is checked (:func:`_safe_members`) before anything
    is written, the extraction itself uses tarfile's ``"data"`` filter where this Python has
    it, into a temporary folder inside ``data_dir`` whose files are then renamed into place
    (those not there yet). One process at a time per directory. Returns the files placed."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    tarball = os.path.join(data_dir, "cifar-10-python.tar.gz")
    base = os.path.join(data_dir, "cifar-10-batches-py")

    def complete():
        return all(os.path.isfile(os.path.join(base, f)) for f in CIFAR10_FILES)

    if complete():
        return []
    placed = []
    try:
        with _unpack_lock(data_dir):
            if complete():  # another process extracted it meanwhile
                return []
            if verify_md5:
                got = _md5(tarball)
                if got != CIFAR10_TGZ_MD5:
                    raise DatasetContentError(
                        f"CIFAR-10: {tarball} fails the md5 check (md5 {got}, expected "
                        f"{CIFAR10_TGZ_MD5}); nothing was extracted; replace it with the official "
                        "cifar-10-python.tar.gz")
            with tarfile.open(tarball, "r:gz") as tar:
                members = _safe_members(tar, tarball, data_dir)
                tmp = tempfile.mkdtemp(prefix=".cifar-10-extract-", dir=data_dir)
                try:
                    if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 (and backports)
                        tar.extractall(tmp, members=members, filter="data")
                    else:
                        tar.extractall(tmp, members=members)  # the member check above guards
                    src = os.path.join(tmp, "cifar-10-batches-py")
                    os.makedirs(base, exist_ok=True)
                    for name in sorted(os.listdir(src)) if os.path.isdir(src) else []:
                        if os.path.isfile(os.path.join(src, name)) and not os.path.lexists(os.path.join(base, name)):
                            os.replace(os.path.join(src, name), os.path.join(base, name))
                            placed.append(name)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    except DatasetMissingError:
        raise
    except (OSError, EOFError, ValueError, zlib.error, tarfile.TarError) as exc:
        raise DatasetMissingError(
            f"CIFAR-10: cannot extract {tarball} ({_one_line(exc)}); replace it with a good copy "
            "or extract it by hand into a writable --data-dir") from None
    return placed


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


def _fashion_mnist_files(data_dir, train: bool, download: bool) -> tuple:
    """Make sure the Fashion-MNIST files are there (decompressing hand-copied .gz files,
    fetching with --download); returns (data_dir, raw folder, legacy) where legacy means
    torchvision's old processed .pt files are what is there."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    raw = os.path.join(data_dir, "FashionMNIST", "raw")
    processed = os.path.join(data_dir, "FashionMNIST", "processed")

    def missing():
        return [f for f in FMNIST_FILES if not os.path.isfile(os.path.join(raw, f))]

    legacy = all(os.path.isfile(os.path.join(processed, f)) for f in ("training.pt", "test.pt"))
    absent = [] if legacy else missing()
    if absent and any(os.path.isfile(os.path.join(raw, f + ".gz")) for f in absent):
        decompress_fashion_mnist(data_dir)  # hand-copied .gz files, as torchvision's download would
        absent = missing()

    def fetch():  # (torchvision is imported only to download)
        from torchvision.datasets import FashionMNIST

        FashionMNIST(root=data_dir, train=train, download=True)

    absent, how = _fetch(absent, download, missing, "the files", fetch, data_dir)
    if absent:
        raise DatasetMissingError(
            f"Fashion-MNIST not found: expected {raw}/{{{','.join(FMNIST_FILES)}}} "
            f"(each raw or .gz; missing: {', '.join(absent)}); {how}"
        )
    return data_dir, raw, legacy


def load_fashion_mnist(data_dir, train: bool, download: bool = False):
    """Fashion-MNIST as ``(images float32 (N,1,28,28), labels int64 (N,))``.

    Reads ``<data_dir>/FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``
    (all four must be present, as torchvision requires; ``.gz`` versions are
    decompressed in place) with ``torchvision.datasets.FashionMNIST``. ``download=True``
    fetches them with torchvision (needs internet). Normalised with mean 0.2860, std
    0.3530. Raises :class:`DatasetMissingError` (one line) when the files are absent and
    cannot be downloaded.
    """
    data_dir, raw, legacy = _fashion_mnist_files(data_dir, train, download)
    from torchvision.datasets import FashionMNIST

    if not legacy:
        prefix = "train" if train else "t10k"
        _check_idx_pair(os.path.join(raw, f"{prefix}-images-idx3-ubyte"),
                        os.path.join(raw, f"{prefix}-labels-idx1-ubyte"))
    ds = _read("Fashion-MNIST", raw, lambda: FashionMNIST(root=data_dir, train=train, download=False),
               "replace them with good copies (--download on a machine with internet access)")
    images = ds.data.numpy()[:, None, :, :]
    labels = ds.targets.numpy().astype(np.int64, copy=False)
    _check_arrays("Fashion-MNIST", raw, images, labels, (1, 28, 28))
    return _normalise(images, FMNIST_MEAN, FMNIST_STD), np.ascontiguousarray(labels)


def open_fashion_mnist(data_dir, train: bool, download: bool = False):
    """Fashion-MNIST as ``(images, labels int64 (N,))`` without reading the images:
    ``images`` is an :class:`ImageRows` over a memory map of the uncompressed IDX file
    (rows read, and normalised as by :func:`load_fashion_mnist`, when indexed). The same
    files, checks and one-line errors as :func:`load_fashion_mnist` (the labels, small,
    are read and checked whole); torchvision's old processed files are loaded whole.
    """
    data_dir, raw, legacy = _fashion_mnist_files(data_dir, train, download)
    if legacy:
        images, labels = load_fashion_mnist(data_dir, train, download)
        return images, labels
    prefix = "train" if train else "t10k"
    images_path = os.path.join(raw, f"{prefix}-images-idx3-ubyte")
    labels_path = os.path.join(raw, f"{prefix}-labels-idx1-ubyte")
    _check_idx_pair(images_path, labels_path)
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
            with open(tmp, "w") as f:
                json.dump(_cifar10_stamp(base), f)
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
    file = None  # (the .npy copy is C-ordered after its header: read through the file)
    if isinstance(images, np.memmap) and images.flags.c_contiguous:
        file = (os.path.join(folder, f"{prefix}-images.npy"), int(images.offset))
    return (ImageRows(images, CIFAR10_MEAN, CIFAR10_STD, file=file),
            labels.astype(np.int64, copy=False))


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
