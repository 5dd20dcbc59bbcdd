"""Reading data files safely: format checks and unpacking (mpi_teleport/DESIGN.md §5.4).

* Unpacking happens once per data directory whatever the number of ranks: one process at
  a time (an ``flock`` on ``<data_dir>/.mpi_teleport-unpack.lock``), each file written
  under a temporary name and renamed into place, so no rank reads a half-written file.
  :func:`.fashion_files.decompress_fashion_mnist` (into a cache, never the data folder),
  :func:`extract_cifar10` (md5 of the archive, every member checked, tarfile's "data"
  filter: nothing is written outside the data directory).
* Content checks (:class:`DatasetContentError`, one line): IDX headers, as many labels as
  images, labels in range.

numpy and the standard library only; :mod:`.datasets` re-exports the public names.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import socket
import tarfile
import tempfile
import zlib

import numpy as np

from ..disk import lock
from ..errors import DatasetMissingError

__all__ = ["DatasetContentError", "extract_cifar10"]

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
