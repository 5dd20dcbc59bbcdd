"""Where the Fashion-MNIST files are, and their checks (mpi_teleport/DESIGN.md §5.4).

A data folder holds the four files of the release, each as it is distributed (``.gz``) or
decompressed, in one of two layouts:

* flat: ``<dir>/train-images-idx3-ubyte[.gz]`` and the three others, as Debian's package
  ``dataset-fashion-mnist`` installs them in ``/usr/share/datasets/fashion-mnist``;
* torchvision's: ``<dir>/FashionMNIST/raw/...``, what ``--download`` makes.

Nothing is ever written into the data folder (it may be read-only, and shared). Where a
file is only there compressed, it is decompressed once into a cache
(:func:`cache_root`: ``$MPI_TELEPORT_CACHE``, else ``$XDG_CACHE_HOME/mpi_teleport``, else
``~/.cache/mpi_teleport``), in a folder named for the source folder and its files' sizes
and times, so a changed source gets a new copy: one process at a time (a lock file there),
each file written under a temporary name and renamed into place, so the many ranks of a
job starting at once all read whole files.

Checks, one line each (:class:`~.unpacking.DatasetContentError`): the IDX headers and
sizes; and where a file claims to be the official release (its size is the official
file's), the md5 of its decompressed bytes against the official one.

Without ``--data-dir`` the folder is searched in this order (:func:`default_data_dir`):
``./data`` where it holds the files (either layout), then Debian's folder.
"""
from __future__ import annotations

import hashlib
import os
import zlib
from typing import cast

from ..errors import DatasetMissingError
from .unpacking import (FMNIST_FILES, DatasetContentError, _gunzip, _md5, _one_line,
                        _unpack_lock)

__all__ = ["DEBIAN_DIR", "decompress_fashion_mnist", "OFFICIAL", "cache_root", "default_data_dir", "locate",
           "decompressed_folder", "check_official", "data_md5"]

DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"  # apt-get install dataset-fashion-mnist
CACHE_ENV = "MPI_TELEPORT_CACHE"

# The official release's decompressed files: size in bytes, md5 (Debian recompressed the
# .gz files, so only the decompressed bytes can be compared).
OFFICIAL = {
    "train-images-idx3-ubyte": (47040016, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
    "train-labels-idx1-ubyte": (60008, "9018921c3c673c538a1fc5bad174d6f9"),
    "t10k-images-idx3-ubyte": (7840016, "8181f5470baa50b63fa0f6fddb340f0a"),
    "t10k-labels-idx1-ubyte": (10008, "15d484375f8d13e6eb1aabb0c3f46965"),
}
_CHECKED: dict = {}  # (path, size, mtime) -> md5 of files already checked in this process


def cache_root() -> str:
    """Where decompressed copies go: ``$MPI_TELEPORT_CACHE``, else
    ``$XDG_CACHE_HOME/mpi_teleport``, else ``~/.cache/mpi_teleport``."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return os.path.abspath(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "mpi_teleport")


def _sources(folder: str) -> dict:
    """File name -> the path that holds it in ``folder`` (decompressed preferred, else .gz),
    for the files present."""
    out = {}
    for name in FMNIST_FILES:
        for candidate in (name, name + ".gz"):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                out[name] = path
                break
    return out


def locate(data_dir) -> tuple[str, dict]:
    """The folder under ``data_dir`` that holds the files (torchvision's layout first, then
    flat) and its sources; the folder with the most of them when none is complete."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    best = None
    for folder in (os.path.join(data_dir, "FashionMNIST", "raw"), data_dir):
        found = _sources(folder)
        if len(found) == len(FMNIST_FILES):
            return folder, found
        if best is None or len(found) > len(best[1]):
            best = (folder, found)
    return cast(tuple[str, dict], best)  # (the loop ran: set)


def default_data_dir(cwd: str | None = None) -> str:
    """The data folder when none is given: ``./data`` where it holds any of the files
    (either layout), else Debian's folder where it exists, else ``./data`` (whose absence
    the reader then reports, saying where else it looked)."""
    local = os.path.join(cwd or os.getcwd(), "data")
    if locate(local)[1]:
        return "data" if cwd is None else local
    if os.path.isdir(DEBIAN_DIR) and locate(DEBIAN_DIR)[1]:
        return DEBIAN_DIR
    return "data" if cwd is None else local


def _cache_key(folder: str, sources: dict) -> str:
    h = hashlib.sha256(os.path.realpath(folder).encode())
    for name in FMNIST_FILES:
        st = os.stat(sources[name])
        h.update(f"|{os.path.basename(sources[name])}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def decompressed_folder(folder: str, sources: dict) -> tuple[str, list]:
    """A folder ``<cache>/fashion-mnist/<key>/FashionMNIST/raw`` holding the four files
    decompressed (``.gz`` sources decompressed once, decompressed ones linked), and the
    files this call wrote. ``folder`` is never written to."""
    target = os.path.join(cache_root(), "fashion-mnist", _cache_key(folder, sources),
                          "FashionMNIST", "raw")

    def todo():
        return [f for f in FMNIST_FILES if not os.path.isfile(os.path.join(target, f))]

    if not todo():  # done before (by this or another process): no lock taken
        return target, []
    done, current = [], None
    try:
        os.makedirs(target, exist_ok=True)
        with _unpack_lock(os.path.dirname(os.path.dirname(target))):  # (beside, not among, the files)
            for name in todo():  # again: what another process did meanwhile is skipped
                current = sources[name]
                dst = os.path.join(target, name)
                if current.endswith(".gz"):
                    _gunzip(current, dst)
                else:  # (a link: torchvision's layout over a flat folder, nothing copied)
                    tmp = f"{dst}.{os.getpid()}.link"
                    os.symlink(os.path.realpath(current), tmp)
                    os.replace(tmp, dst)
                done.append(name)
    except DatasetMissingError:
        raise
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        if current is None:
            raise DatasetMissingError(
                f"Fashion-MNIST: cannot write the decompressed copies under {cache_root()} "
                f"({_one_line(exc)}); set {CACHE_ENV} to a writable folder, or decompress the "
                f"files by hand (gunzip -k) into a folder given as --data-dir") from None
        raise DatasetMissingError(
            f"Fashion-MNIST: cannot decompress {current} ({_one_line(exc)}); replace it with a "
            "good copy, or decompress it by hand (gunzip -k)") from None
    return target, done


def decompress_fashion_mnist(data_dir) -> list:
    """Decompress the ``.gz`` files of ``data_dir``'s Fashion-MNIST folder into the cache
    (:func:`decompressed_folder`), once whatever the number of processes; returns the
    files this call wrote (none when there is nothing to do). ``data_dir`` is not written."""
    folder, sources = locate(data_dir)
    if len(sources) < len(FMNIST_FILES) or not any(p.endswith(".gz") for p in sources.values()):
        return []
    return decompressed_folder(folder, sources)[1]


def check_official(paths: dict) -> None:
    """Each decompressed file whose size is the official file's must have its md5 (else
    one line); other sizes are not the official release (the tests' small files) and the
    header checks alone apply."""
    for name, path in paths.items():
        size, want = OFFICIAL[name]
        st = os.stat(path)
        if st.st_size != size:
            continue
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        got = _CHECKED.get(key) or _stamped(key)
        if got is None:
            got = _md5(path)
            _stamp(key, got)
        _CHECKED[key] = got
        if got != want:
            raise DatasetContentError(
                f"Fashion-MNIST: {path} has the official file's size but md5 {got}, expected "
                f"{want}: the file is damaged; replace it (apt-get install --reinstall "
                "dataset-fashion-mnist, or a good copy)")


def _stamp_path(key: tuple) -> str:
    """Where the md5 of the file ``key`` = (real path, size, mtime in ns) is kept: the cache,
    so that the 25 ranks of the next job (each one read 47 MB for it, about 0.1 s) and the
    next run skip it; a file changed since has another size or mtime, hence another key."""
    name = hashlib.sha256("|".join(map(str, key)).encode()).hexdigest()[:24]
    return os.path.join(cache_root(), "fashion-mnist", "checked", name)


def _stamped(key: tuple) -> str | None:
    try:
        with open(_stamp_path(key)) as f:
            text = f.read().strip()
    except OSError:
        return None
    return text if len(text) == 32 else None


def _stamp(key: tuple, md5: str) -> None:
    """Keep ``md5`` for ``key`` (temp + rename: ranks that check at once each write a whole
    stamp); a cache that cannot be written only means the next process reads the file again."""
    path = _stamp_path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(md5 + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def data_md5(paths: dict) -> dict:
    """md5 of each decompressed file (for results that name the data they came from)."""
    return {name: _md5(path) for name, path in sorted(paths.items())}
