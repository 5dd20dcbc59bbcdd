"""Fashion-MNIST as it is installed (issue 29): the four files flat in a folder, .gz or
decompressed, the folder never written to (decompressed copies go to the cache), the md5 of
files that claim to be the official release, the search order without --data-dir, the
shuffled per-node passes (sampling="epochs"); and the real files of Debian's
``dataset-fashion-mnist`` where installed: read and trained on (under MPI, equal to the simulator:
tests/in_rank/test_command_line_mpi.py)."""
from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from mpi_teleport import sim
from mpi_teleport.problems import fashion_files
from mpi_teleport.problems.datasets import (DatasetContentError, DatasetMissingError,
                                            fashion_mnist_paths)
from mpi_teleport.problems.sampling import batches_per_pass, epoch_batch
from helpers import idx_bytes as _idx, real_fashion_mnist, write_fashion_mnist as _flat

REAL = Path(fashion_files.DEBIAN_DIR)
HAVE_REAL, NO_REAL = real_fashion_mnist()
NEEDS_REAL = pytest.mark.skipif(not HAVE_REAL, reason=NO_REAL)


def _snapshot(root: Path) -> dict:
    """Every path under root -> (size, mtime_ns, mode): what "unchanged" means for a folder."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


# ------------------------------------------------------------------------- the reader
@pytest.mark.parametrize("gz", [(), ("train",), ("train", "t10k")], ids=["raw", "mixed", "gz"])
def test_a_flat_folder_is_read_as_it_is_and_never_written(tmp_path, gz):
    pytest.importorskip("torchvision")
    from mpi_teleport.problems.datasets import load_fashion_mnist, open_fashion_mnist

    folder = tmp_path / "fashion"
    data = _flat(folder, gz=gz)
    before = _snapshot(folder)
    for train, prefix in ((True, "train"), (False, "t10k")):
        x, y = load_fashion_mnist(folder, train=train)  # torchvision's reader
        rows, labels = open_fashion_mnist(folder, train=train)  # the memory-mapped one
        assert np.array_equal(y, data[prefix][1]) and np.array_equal(labels, y)
        assert np.array_equal(rows[np.arange(len(y))], x)
    assert _snapshot(folder) == before


def test_debians_files_reach_torchvisions_fashion_mnist(tmp_path):
    """fashion_mnist_root: a flat folder of .gz files (Debian's layout) becomes a root
    torchvision's FashionMNIST reads without downloading; the folder is not written to
    (issue 57)."""
    pytest.importorskip("torchvision")
    from torchvision.datasets import FashionMNIST

    from mpi_teleport.problems.datasets import fashion_mnist_root

    folder = tmp_path / "debian"
    data = _flat(folder, gz=("train", "t10k"))
    before = _snapshot(folder)
    root = fashion_mnist_root(folder)
    for train, prefix in ((True, "train"), (False, "t10k")):
        ds = FashionMNIST(root, train=train, download=False)
        assert np.array_equal(ds.data.numpy(), data[prefix][0])
        assert np.array_equal(ds.targets.numpy(), data[prefix][1])
    assert _snapshot(folder) == before and fashion_mnist_root(folder) == root
    with pytest.raises(DatasetMissingError, match="^Fashion-MNIST not found"):
        fashion_mnist_root(tmp_path / "empty")


def test_a_damaged_official_file_fails_its_md5_in_one_line(tmp_path):
    """A labels file of the official size (60,000 labels) whose bytes are not the official
    ones: refused by its md5; other sizes (the tests' files) are checked by header only."""
    labels = {"train": np.zeros(60000, np.uint8), "t10k": np.zeros(20, np.uint8)}
    folder = tmp_path / "fashion"
    _flat(folder, n_train=60000, gz=(), labels=labels)
    (folder / "train-images-idx3-ubyte").write_bytes(_idx(np.zeros((60000, 28, 28), np.uint8)))
    with pytest.raises(DatasetContentError) as e:
        fashion_mnist_paths(folder)
    msg = str(e.value)
    assert "\n" not in msg and "md5" in msg and "expected" in msg
    assert "official" in msg and "dataset-fashion-mnist" in msg


def test_an_md5_checked_once_is_kept_in_the_cache_and_a_changed_file_checked_again(
        tmp_path, monkeypatch):
    """Every rank of every job checked the official files' md5 (47 MB read each): the
    result is kept in the cache per (path, size, mtime), so the next process skips it; a
    file whose bytes changed (another mtime) is checked again, and refused if damaged."""
    folder = tmp_path / "fashion"
    _flat(folder, gz=())
    labels = folder / "train-labels-idx1-ubyte"
    good = fashion_files._md5(str(labels))
    monkeypatch.setitem(fashion_files.OFFICIAL, "train-labels-idx1-ubyte", (labels.stat().st_size, good))
    monkeypatch.setenv("MPI_TELEPORT_CACHE", str(tmp_path / "cache"))
    reads = []
    real_md5 = fashion_files._md5
    monkeypatch.setattr(fashion_files, "_md5", lambda path: reads.append(path) or real_md5(path))
    for process in range(3):  # each a new process: nothing remembered in memory
        monkeypatch.setattr(fashion_files, "_CHECKED", {})
        fashion_mnist_paths(folder)
    assert len(reads) == 1 and list((tmp_path / "cache" / "fashion-mnist" / "checked").iterdir())
    data = bytearray(labels.read_bytes())
    data[-1] ^= 1  # other bytes, same size, a later mtime
    labels.write_bytes(bytes(data))
    os.utime(labels, ns=(labels.stat().st_atime_ns, labels.stat().st_mtime_ns + 10**9))
    monkeypatch.setattr(fashion_files, "_CHECKED", {})
    with pytest.raises(DatasetContentError, match="md5"):
        fashion_mnist_paths(folder)
    assert len(reads) == 2


def test_missing_files_say_where_they_were_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fashion_files, "DEBIAN_DIR", str(tmp_path / "not-installed"))
    with pytest.raises(DatasetMissingError) as e:
        fashion_mnist_paths(None)
    msg = str(e.value)
    assert "\n" not in msg and "apt-get install dataset-fashion-mnist" in msg
    assert "no --data-dir given" in msg and str(tmp_path / "data") in msg


def test_search_order_without_data_dir(tmp_path, monkeypatch):
    debian = tmp_path / "debian"
    _flat(debian, gz=("train", "t10k"))
    monkeypatch.setattr(fashion_files, "DEBIAN_DIR", str(debian))
    work = tmp_path / "work"
    work.mkdir()
    assert fashion_files.default_data_dir(str(work)) == str(debian)  # no ./data: Debian's
    _flat(work / "data" / "FashionMNIST" / "raw", gz=())
    assert fashion_files.default_data_dir(str(work)) == str(work / "data")  # ./data first
    monkeypatch.setattr(fashion_files, "DEBIAN_DIR", str(tmp_path / "absent"))
    assert fashion_files.default_data_dir(str(tmp_path / "elsewhere")) == str(tmp_path / "elsewhere" / "data")


def test_the_cache_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MPI_TELEPORT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "fashion"
    _flat(folder, gz=("train", "t10k"))
    paths = fashion_mnist_paths(folder)
    assert all(p.startswith(str(tmp_path / "cache")) for p in paths.values())
    monkeypatch.delenv("MPI_TELEPORT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fashion_files.cache_root() == str(tmp_path / "xdg" / "mpi_teleport")


# ----------------------------------------------------------------- shuffled passes
@pytest.mark.parametrize("size,batch", [(96, 32), (100, 32), (5, 32), (1, 1)])
def test_a_pass_visits_every_sample_once(size, batch):
    """Rounds 0..b-1 of one pass partition the node's share; the next pass is another
    order; the same (seed, node, pass) gives the same order."""
    from mpi_teleport.core import rng

    def order(node, epoch, n):
        return rng.generator(7, rng.STREAM_EPOCH, epoch, node).permutation(n)

    per_pass = batches_per_pass(size, batch)
    seen = np.concatenate([epoch_batch(order, 3, t, size, batch) for t in range(per_pass)])
    assert sorted(seen.tolist()) == list(range(size))
    assert all(len(epoch_batch(order, 3, t, size, batch)) <= batch for t in range(per_pass))
    second = np.concatenate([epoch_batch(order, 3, t, size, batch) for t in range(per_pass, 2 * per_pass)])
    assert sorted(second.tolist()) == list(range(size))
    if size > 5:
        assert not np.array_equal(seen, second)
    assert np.array_equal(epoch_batch(order, 3, 1, size, batch), epoch_batch(order, 3, 1, size, batch))


def test_torch_problem_draws_shuffled_passes_by_round():
    torch = pytest.importorskip("torch")
    import mpi_teleport as mt

    X = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    build = lambda: torch.nn.Linear(4, 2)  # noqa: E731
    p = mt.TorchProblem(build, (X, y), nodes=4, seed=1, batch_size=16, sampling="epochs",
                        partition="iid")
    for node in range(4):
        share = p.parts[node]
        per_pass = batches_per_pass(len(share), 16)
        seen = np.concatenate([p.batch(node, t) for t in range(per_pass)])
        assert sorted(seen.tolist()) == sorted(share.tolist())  # each sample once a pass
    again = mt.TorchProblem(build, (X, y), nodes=4, seed=1, batch_size=16, sampling="epochs",
                            partition="iid", local_nodes=[2])
    assert all(np.array_equal(p.batch(2, t), again.batch(2, t)) for t in (0, 5, 40, 7))
    with pytest.raises(ValueError, match="sampling must be one of 'replacement', 'epochs'"):
        mt.TorchProblem(build, (X, y), nodes=4, sampling="shuffle")


def test_the_command_line_refuses_an_unknown_sampling(capsys):
    assert sim.main(["--nodes", "4", "--problem", "digits", "--sampling", "shuffled"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sampling" in err[0] and "epochs" in err[0]


def test_val_fraction_zero_with_k_auto_is_refused(capsys):
    assert sim.main(["--nodes", "4", "--problem", "digits", "--k", "auto", "--val-fraction", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--val-fraction" in err[0]


# ------------------------------------------------------------------------ the real data
FLAGS = ["--nodes", "5", "--problem", "fashion-mnist", "--algorithm", "teleportation", "--k", "2",
         "--rounds", "6", "--lr", "0.01", "--momentum", "0.9", "--alpha", "0.1", "--sampling",
         "epochs", "--val-fraction", "0", "--log-every", "3", "--progress", "off"]


@NEEDS_REAL
def test_the_real_files_are_read_in_place_and_trained_on(tmp_path):
    """Found without --data-dir, checked against the official md5s, folder unchanged."""
    pytest.importorskip("torch")
    before = _snapshot(REAL)
    paths = fashion_mnist_paths(None)
    assert fashion_files.data_md5(paths) == {k: v[1] for k, v in sorted(fashion_files.OFFICIAL.items())}
    with contextlib.redirect_stdout(io.StringIO()):
        assert sim.main([*FLAGS, "--out", str(tmp_path / "sim")]) == 0
    records = [json.loads(line) for line in (tmp_path / "sim" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 3, 6] and all(0 <= r["accuracy"] <= 1 for r in records)
    assert _snapshot(REAL) == before


# The real data under MPI, equal to the simulator: tests/in_rank/test_command_line_mpi.py.
