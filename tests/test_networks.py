"""Network problems in the simulator: real learning on the offline digits data, epochs,
the per-node class histogram, and the one-line error for a missing data set."""
import importlib.util
import json

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                                reason="needs scikit-learn (the nn extra)")  # (found, not
# imported: collecting this file in each pytest worker need not load it)

from mpi_teleport.front.cli import problem_of  # noqa: E402
from mpi_teleport.session.settings import resolve  # noqa: E402
from mpi_teleport.disk.output import RunFiles  # noqa: E402
from mpi_teleport.front.cli import run_values  # noqa: E402
from mpi_teleport.session.prepare import with_epochs  # noqa: E402
from mpi_teleport.problems import make_problem  # noqa: E402
from mpi_teleport.sim import main, simulate  # noqa: E402


def test_digits_accuracy_rises_well_above_chance():
    cfg = resolve({"nodes": 8, "problem": "digits", "k": 4, "rounds": 150, "lr": 0.05,
                   "momentum": 0.9, "alpha": 10.0, "log_every": 50, "algorithm": "teleportation"})
    files = RunFiles(None)
    summary = simulate(cfg, "teleportation", 4, files)
    first, last = files.records[0]["accuracy"], summary["final_accuracy"]
    assert first < 0.3  # an untrained CNN is near chance (0.1)
    assert last > 0.6, files.records


def test_epochs_give_every_method_the_same_samples():
    cfg = resolve({"nodes": 8, "problem": "digits", "epochs": 2.0, "batch_size": 16})
    problem = make_problem(problem_of(cfg))
    tele = with_epochs(run_values(cfg, "teleportation", 2), problem).rounds
    dsgd = with_epochs(run_values(cfg, "dsgd", 8), problem).rounds
    assert dsgd == -(-2 * problem.n_train // (16 * 8))
    assert abs(tele - 4 * dsgd) <= 4  # n/k = 4 times more rounds, up to rounding


def test_config_reports_class_histogram(tmp_path):
    assert main(["--nodes", "5", "--problem", "digits", "--rounds", "3", "--algorithm", "dsgd",
                 "--alpha", "0.1", "--out", str(tmp_path)]) == 0
    cfg = json.loads((tmp_path / "config.json").read_text())
    hist = cfg["class_histogram"]
    assert len(hist) == 5 and all(sum(h) > 0 for h in hist)
    assert sum(map(sum, hist)) == cfg["n_train"]


def test_missing_data_set_is_one_line_naming_the_files(tmp_path, capsys):
    assert main(["--nodes", "4", "--problem", "fashion-mnist", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "train-images-idx3-ubyte" in err[0] and str(tmp_path) in err[0]


def test_missing_data_dir_is_refused_before_loading(capsys):
    assert main(["--nodes", "4", "--problem", "cifar10", "--data-dir", "/no/such/dir"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_host_staging_path_equals_the_flat_path_on_the_cpu():
    """The path a GPU rank takes (model apart from the token vector, copies both ways) is
    exercised on the CPU: same initial vector, gradients and evaluation as the zero-copy
    path (no GPU is needed to test its bookkeeping)."""
    import numpy as np

    from mpi_teleport.problems.network import NetworkProblem

    cfg = problem_of(resolve({"nodes": 4, "problem": "digits", "alpha": 0.5}))
    flat, staged = NetworkProblem(cfg, "cpu"), NetworkProblem(cfg, "cpu", staged=True)
    assert flat.flat is not None and staged.flat is None
    x0 = flat.initial()
    assert np.array_equal(x0, staged.initial()) and staged.dim == flat.dim
    rows = np.stack([x0, x0 * np.float32(0.5), x0 + np.float32(0.01)])
    nodes = [0, 3, 1]
    for t in (0, 7):
        g_flat, g_staged = flat.gradient(nodes, rows, t), staged.gradient(nodes, rows, t)
        assert np.array_equal(g_flat, g_staged) and np.abs(g_flat).sum() > 0
    assert flat.evaluate(rows) == staged.evaluate(rows)
    assert flat.validate(rows) == staged.validate(rows)


def test_device_choice(monkeypatch):
    """cpu on request or without CUDA; --device cuda without CUDA is a one-line usage
    error; with GPUs, rank r gets cuda:(local rank mod GPUs). The local rank is given
    (the MPI layer computes it from a shared-memory split that every rank joins)."""
    import torch

    from mpi_teleport.session.settings import UsageError
    from mpi_teleport.problems.network import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("cpu") == "cpu" and pick_device("auto", 3) == "cpu"
    with pytest.raises(UsageError, match="--device cuda: no CUDA device is visible") as e:
        pick_device("cuda", 5)
    assert "\n" not in str(e.value) and "--device auto / cpu" in str(e.value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert [pick_device("auto", r) for r in range(6)] == \
        ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]
    assert pick_device("cuda", 2) == "cuda:2" and pick_device("cpu", 2) == "cpu"
