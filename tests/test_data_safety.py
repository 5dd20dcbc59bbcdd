"""Data sets on disk, handled safely: a crafted CIFAR-10 archive writes nothing outside
--data-dir (md5 first, then a member check, then tarfile's "data" filter); several
processes unpacking at once all see whole files; inconsistent files are one-line errors;
more nodes than samples is refused."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from mpi_teleport.problems import datasets, unpacking  # noqa: F401
from mpi_teleport.problems.datasets import (
    CIFAR10_FILES,
    FMNIST_FILES,
    UNPACK_LOCK,
    DatasetContentError,
    DatasetMissingError,
    NotEnoughSamplesError,
    check_enough_samples,
    decompress_fashion_mnist,
    extract_cifar10,
    load_cifar10,
    load_fashion_mnist,
)
from helpers import ROOT


def _tree(root: Path) -> dict:
    """Every path under root (links not followed) -> its bytes (None for folders/links)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p)] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return out


# ------------------------------------------------------------------ crafted archives
def _cifar_batch(n: int, seed: int, labels=None) -> bytes:
    g = np.random.default_rng(seed)
    entry = {"batch_label": "b", "data": g.integers(0, 256, size=(n, 3072), dtype=np.uint8),
             "labels": list(g.integers(0, 10, size=n)) if labels is None else labels,
             "filenames": [f"{i}.png" for i in range(n)]}
    return pickle.dumps(entry, protocol=2)


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **fields) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data) if fields.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.size else None)


def _good_members(tar: tarfile.TarFile) -> None:
    _add(tar, "cifar-10-batches-py", type=tarfile.DIRTYPE, mode=0o755)
    for i, name in enumerate(CIFAR10_FILES):
        data = pickle.dumps({"label_names": [str(c) for c in range(10)]}) if name == "batches.meta" \
            else _cifar_batch(3, i)
        _add(tar, f"cifar-10-batches-py/{name}", data)


def _archive(data_dir: Path, attack: str, outside: Path) -> Path:
    """cifar-10-python.tar.gz in data_dir: the good members plus one attack."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "cifar-10-python.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        if attack == "dotdot":  # two levels above the data directory
            _add(tar, "cifar-10-batches-py/../../../escaped.txt", b"pwned")
        elif attack == "absolute":
            _add(tar, str(outside / "absolute.txt"), b"pwned")
        elif attack == "symlink":  # a link out, then a file written through it
            _add(tar, "cifar-10-batches-py/link", type=tarfile.SYMTYPE, linkname=str(outside))
            _add(tar, "cifar-10-batches-py/link/through.txt", b"pwned")
        elif attack == "hardlink":
            _add(tar, "cifar-10-batches-py/hard", type=tarfile.LNKTYPE, linkname=str(outside / "victim.txt"))
        elif attack == "device":
            _add(tar, "cifar-10-batches-py/dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        elif attack == "fifo":
            _add(tar, "cifar-10-batches-py/fifo", type=tarfile.FIFOTYPE)
        elif attack == "elsewhere":
            _add(tar, "somewhere-else/x.txt", b"pwned")
        _good_members(tar)
    return path


ATTACKS = ["dotdot", "absolute", "symlink", "hardlink", "device", "fifo", "elsewhere"]
REASON = {"dotdot": "'..' component", "absolute": "absolute path", "symlink": "symbolic link",
          "hardlink": "hard link", "device": "device", "fifo": "FIFO",
          "elsewhere": "not under cifar-10-batches-py/"}


@pytest.fixture
def layout(tmp_path):
    """tmp/outside (a victim folder), tmp/a/b/data (the data directory)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me")
    return tmp_path / "a" / "b" / "data", outside


@pytest.mark.parametrize("attack", ATTACKS)
def test_crafted_archive_with_wrong_md5_is_refused_before_extracting(layout, attack, tmp_path):
    data_dir, outside = layout
    tarball = _archive(data_dir, attack, outside)
    before = _tree(tmp_path)
    with pytest.raises(DatasetContentError) as e:
        load_cifar10(data_dir, train=True)  # the CLI's path: verify_md5 on
    msg = str(e.value)
    assert "\n" not in msg and "fails the md5 check" in msg and str(tarball) in msg
    assert "nothing was extracted" in msg
    after = _tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith(UNPACK_LOCK)} == before


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("md5", ["matching", "unchecked"])
def test_crafted_archive_is_refused_even_when_its_md5_matches(layout, attack, md5, tmp_path, monkeypatch):
    data_dir, outside = layout
    tarball = _archive(data_dir, attack, outside)
    if md5 == "matching":
        monkeypatch.setattr(unpacking, "CIFAR10_TGZ_MD5", hashlib.md5(tarball.read_bytes()).hexdigest())
    before = _tree(tmp_path)
    with pytest.raises(DatasetContentError) as e:
        extract_cifar10(data_dir, verify_md5=(md5 == "matching"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"CIFAR-10: refusing to extract {tarball}: member ")
    assert REASON[attack] in msg and "nothing was extracted" in msg
    after = _tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith(UNPACK_LOCK)} == before
    assert not (data_dir / "cifar-10-batches-py").exists()
    assert (outside / "victim.txt").read_text() == "keep me"


def test_tarfile_filter_guards_even_without_the_member_check(layout, tmp_path, monkeypatch):
    """Second layer: with the member check switched off, tarfile's "data" filter still
    refuses a path out of the directory (one line, nothing written outside)."""
    if not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python's tarfile has no extraction filters")
    data_dir, outside = layout
    _archive(data_dir, "dotdot", outside)
    monkeypatch.setattr(unpacking, "_safe_members", lambda tar, *a: tar.getmembers())
    before = {k: v for k, v in _tree(tmp_path).items() if not k.startswith(str(data_dir))}
    with pytest.raises(DatasetMissingError) as e:
        extract_cifar10(data_dir, verify_md5=False)
    assert "\n" not in str(e.value) and "cannot extract" in str(e.value)
    after = {k: v for k, v in _tree(tmp_path).items() if not k.startswith(str(data_dir))}
    assert after == before and not (tmp_path / "a" / "escaped.txt").exists()


def test_good_archive_is_extracted_once_and_loads(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    tarball = data_dir / "cifar-10-python.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        _good_members(tar)
    monkeypatch.setattr(unpacking, "CIFAR10_TGZ_MD5", hashlib.md5(tarball.read_bytes()).hexdigest())
    assert sorted(extract_cifar10(data_dir)) == sorted(CIFAR10_FILES)
    assert extract_cifar10(data_dir) == []  # done already: skipped
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(
        ["cifar-10-batches-py", "cifar-10-python.tar.gz", UNPACK_LOCK])  # no temporary left
    pytest.importorskip("torchvision")
    x, y = load_cifar10(data_dir, train=True, verify_md5=False)
    assert x.shape == (15, 3, 32, 32) and len(y) == 15


def test_damaged_archive_is_one_line(tmp_path):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"\x1f\x8b\x08 not really gzip")
    with pytest.raises(DatasetMissingError) as e:
        extract_cifar10(tmp_path, verify_md5=False)
    assert "cannot extract" in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------- unpacking, several at once
def _idx(arr: np.ndarray, magic: int | None = None) -> bytes:
    """IDX (LeCun) big-endian unsigned-byte file: magic 0x0000 08 <ndim>, dims, data."""
    head = struct.pack(">I", 0x0800 + arr.ndim if magic is None else magic)
    return head + struct.pack(f">{arr.ndim}I", *arr.shape) + np.ascontiguousarray(arr, np.uint8).tobytes()


def _fmnist(root: Path, n_train=12, n_test=5, gz=False, big=False, **override) -> Path:
    """The four Fashion-MNIST files; ``override`` maps a file name to the bytes it gets."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    g = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = g.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        if big:  # compressible but large: decompressing takes a while
            x = np.tile(np.arange(784, dtype=np.uint8).reshape(1, 28, 28), (n, 1, 1))
            x[:, 0, 0] = np.arange(n) % 251
        y = g.integers(0, 10, size=n, dtype=np.uint8)
        for kind, arr in (("images-idx3-ubyte", x), ("labels-idx1-ubyte", y)):
            name = f"{prefix}-{kind}"
            data = override.get(name, _idx(arr))
            if gz:
                (raw / (name + ".gz")).write_bytes(gzip.compress(data, compresslevel=1))
            else:
                (raw / name).write_bytes(data)
    return raw


def test_six_processes_decompress_at_once_all_see_whole_files(tmp_path):
    """Six processes (ranks starting at once) decompress into the cache: each file once,
    each process reads whole files, and the data folder is not written to."""
    raw = _fmnist(tmp_path, n_train=60000, n_test=10000, gz=True, big=True)
    expect = {f: hashlib.sha256(gzip.decompress((raw / (f + ".gz")).read_bytes())).hexdigest()
              for f in FMNIST_FILES}
    before = _tree(tmp_path)
    go = tmp_path.parent / f"{tmp_path.name}-go"
    code = (
        "import hashlib, os, sys, time\n"
        "from mpi_teleport.problems import fashion_files\n"
        "from mpi_teleport.problems.datasets import FMNIST_FILES\n"
        "while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
        "folder, sources = fashion_files.locate(sys.argv[1])\n"
        "target, done = fashion_files.decompressed_folder(folder, sources)\n"
        "for f in FMNIST_FILES:\n"
        "    print(f, hashlib.sha256(open(os.path.join(target, f), 'rb').read()).hexdigest())\n"
        "print('wrote', len(done), target)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(go)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    go.write_text("")
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    wrote, targets = 0, set()
    for out, _ in results:
        lines = out.split("\n")
        assert dict(line.split() for line in lines[:4]) == expect  # whole files, each process
        _, count, target = lines[4].split()
        wrote += int(count)
        targets.add(target)
    assert wrote == 4  # each file decompressed once, by one of them
    (target,) = targets
    assert target.startswith(os.environ["MPI_TELEPORT_CACHE"])
    assert sorted(os.listdir(target)) == sorted(FMNIST_FILES)  # no temporary left
    assert _tree(tmp_path) == before  # nothing written into the data folder


def test_three_processes_extract_cifar_at_once(tmp_path):
    tarball = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        _good_members(tar)
    go = tmp_path / "go"
    code = ("import os, sys, time\nfrom mpi_teleport.problems.datasets import extract_cifar10\n"
            "while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
            "print(len(extract_cifar10(sys.argv[1], verify_md5=False)))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(go)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    go.write_text("")
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    assert sorted(int(out) for out, _ in results) == [0, 0, len(CIFAR10_FILES)]
    with tarfile.open(tarball) as tar:
        for m in tar.getmembers():
            if m.isfile():
                assert (tmp_path / m.name).read_bytes() == tar.extractfile(m).read()


def test_decompress_skips_when_done_and_reports_a_bad_gz(tmp_path):
    raw = _fmnist(tmp_path, gz=True)
    assert sorted(decompress_fashion_mnist(tmp_path)) == sorted(FMNIST_FILES)
    assert decompress_fashion_mnist(tmp_path) == []
    assert sorted(p.name for p in raw.iterdir()) == sorted(f + ".gz" for f in FMNIST_FILES)
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"abc")[:-6])  # truncated
    with pytest.raises(DatasetMissingError) as e:
        decompress_fashion_mnist(tmp_path)
    msg = str(e.value)
    assert "cannot decompress" in msg and "t10k-labels-idx1-ubyte.gz" in msg and "\n" not in msg
    cache = Path(os.environ["MPI_TELEPORT_CACHE"])
    assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp")]
    good = gzip.compress(b"x" * 1000)
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(good[:10] + b"\xff" * 20 + good[30:])  # bad deflate
    with pytest.raises(DatasetMissingError, match="cannot decompress .*t10k-labels-idx1-ubyte.gz"):
        decompress_fashion_mnist(tmp_path)


def test_decompress_where_the_cache_is_not_writable(tmp_path, monkeypatch):
    _fmnist(tmp_path, gz=True)

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(unpacking.lock, "exclusive", refused)
    with pytest.raises(DatasetMissingError) as e:
        decompress_fashion_mnist(tmp_path)
    msg = str(e.value)
    assert "cannot write the decompressed copies" in msg and "MPI_TELEPORT_CACHE" in msg
    assert "gunzip -k" in msg and "\n" not in msg


# ------------------------------------------------------------------------ consistency
def _labels(n, top=10):
    return np.random.default_rng(1).integers(0, top, size=n, dtype=np.uint8)


IMG = np.zeros((12, 28, 28), np.uint8)
FMNIST_BAD = {
    "label out of range": ({"train-labels-idx1-ubyte": _idx(np.array([3] * 11 + [12], np.uint8))},
                           "label 12 of sample 11 is outside 0..9"),
    "more labels than images": ({"train-labels-idx1-ubyte": _idx(_labels(13))},
                                "hold 13 labels for 12 images"),
    "fewer labels than images": ({"train-labels-idx1-ubyte": _idx(_labels(7))},
                                 "hold 7 labels for 12 images"),
    "wrong magic": ({"train-images-idx3-ubyte": _idx(IMG, magic=0x0D03)},
                    "has magic 0x00000d03, expected 0x00000803"),
    "labels with image magic": ({"train-labels-idx1-ubyte": _idx(_labels(12).reshape(12, 1, 1))},
                                "expected 0x00000801"),
    "wrong shape": ({"train-images-idx3-ubyte": _idx(np.zeros((12, 28, 27), np.uint8))},
                    "holds 28 x 27 images, expected 28 x 28"),
    "truncated": ({"train-images-idx3-ubyte": _idx(IMG)[:-100]},
                  "holds 9324 bytes, but its header (12 x 28 x 28) says 9424"),
    "empty": ({"train-labels-idx1-ubyte": b""}, "too short for an IDX header"),
}


@pytest.mark.parametrize("case", list(FMNIST_BAD))
def test_inconsistent_fashion_mnist_is_one_line(tmp_path, case):
    pytest.importorskip("torchvision")
    override, fragment = FMNIST_BAD[case]
    raw = _fmnist(tmp_path, **override)
    with pytest.raises(DatasetContentError) as e:
        load_fashion_mnist(tmp_path, train=True)
    msg = str(e.value)
    assert fragment in msg and str(raw) in msg and "\n" not in msg
    assert isinstance(e.value, DatasetMissingError)  # what the command line already catches
    load_fashion_mnist(tmp_path, train=False)  # the test part is fine


def _cifar_dir(root: Path, bad: str | None) -> Path:
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    for i, name in enumerate(CIFAR10_FILES):
        if name == "batches.meta":
            data = pickle.dumps({"label_names": [str(c) for c in range(10)]})
        elif name == "data_batch_2" and bad == "label out of range":
            data = _cifar_batch(3, i, labels=[1, 10, 2])
        elif name == "data_batch_2" and bad == "more labels than images":
            data = _cifar_batch(3, i, labels=[1, 2, 3, 4])
        elif name == "data_batch_2" and bad == "fewer labels than images":
            data = _cifar_batch(3, i, labels=[1])
        else:
            data = _cifar_batch(3, i)
        (base / name).write_bytes(data)
    return base


@pytest.mark.parametrize("case,fragment", [
    ("label out of range", "label 10 of sample 4 is outside 0..9"),
    ("more labels than images", "hold 16 labels for 15 images"),
    ("fewer labels than images", "hold 13 labels for 15 images"),
])
def test_inconsistent_cifar10_is_one_line(tmp_path, case, fragment):
    pytest.importorskip("torchvision")
    base = _cifar_dir(tmp_path, case)
    with pytest.raises(DatasetContentError) as e:
        load_cifar10(tmp_path, train=True, verify_md5=False)
    msg = str(e.value)
    assert fragment in msg and str(base) in msg and "\n" not in msg


# --------------------------------------------------------------------- sample count
def test_more_nodes_than_samples_is_refused():
    check_enough_samples(1437, 1437, "--problem digits")  # one each: fine
    with pytest.raises(NotEnoughSamplesError) as e:
        check_enough_samples(1437, 2000, "--problem digits")
    msg = str(e.value)
    assert msg == ("--problem digits has 1437 training samples, too few for 2000 nodes (every node "
                   "needs at least one): use --nodes 1437 or fewer, or a larger data set")
    assert isinstance(e.value, DatasetMissingError) and isinstance(e.value, ValueError)
