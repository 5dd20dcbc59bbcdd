"""The examples shipped in mpi_teleport/examples/ run as their docstrings say, and give the
same numbers in this process and under mpirun (mpi_teleport/DESIGN.md §7).

* logistic.py: the numpy Problem through the API (its main() here, and ``python -m
  mpi_teleport.examples.logistic --mpi`` under mpirun; through the command lines,
  ``--problem mpi_teleport.examples.logistic:problem``: tests/test_api.py);
* custom_model.py: a user's torch model, ``--mpi --out X`` under ``mpirun -n 4`` and its
  main() here with ``--out Y`` write the same metrics.jsonl (``time_s`` aside);
* mnist_port.py: the PyTorch-script tutorial's port of the official MNIST example, likewise (2 ranks).
"""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import pytest

from mpi_teleport.disk.output import read_jsonl
from helpers import without_time

HAS_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "sklearn"))


def _records(path: Path) -> list[dict]:
    return without_time(read_jsonl(path))


def _in_process(main, argv: list[str], cwd: Path, capsys) -> str:
    """What ``python -m <example> argv`` prints, run here (its main(), in `cwd`)."""
    capsys.readouterr()
    with contextlib.chdir(cwd):
        assert main(argv) == 0
    return capsys.readouterr().out


def test_logistic_example_prints_the_same_in_process_and_under_mpirun(tmp_path, mpirun, capsys):
    from mpi_teleport.examples import logistic

    here = _in_process(logistic.main, ["--nodes", "4", "--rounds", "60"], tmp_path, capsys)
    ranks = mpirun(4, ["-m", "mpi_teleport.examples.logistic", "--mpi", "--rounds", "60"],
                   timeout=300, cwd=tmp_path)
    assert ranks.returncode == 0, ranks.stderr[-2000:]
    lines = here.splitlines()
    assert len(lines) == 3 and lines[0].startswith("Teleportation (k=2): final loss")
    assert ranks.stdout.splitlines() == lines  # same final losses and the same chosen k


# (the logistic factory through both command lines, MPI equal to the simulator:
# tests/test_api.py::test_a_factory_problem_runs_under_mpi_like_the_simulator)


@pytest.mark.torch
@pytest.mark.skipif(not HAS_TORCH, reason="needs torch and scikit-learn (the nn extra)")
def test_custom_model_under_mpirun_equals_the_simulator(tmp_path, mpirun, capsys):
    from mpi_teleport.examples import custom_model

    rounds = ["--rounds", "20"]
    sim = _in_process(custom_model.main, ["--nodes", "4", *rounds, "--out", "sim"], tmp_path, capsys)
    ranks = mpirun(4, ["-m", "mpi_teleport.examples.custom_model", "--mpi", *rounds,
                       "--out", "mpi"], timeout=600, cwd=tmp_path)
    assert ranks.returncode == 0, ranks.stderr[-2000:]
    records = _records(tmp_path / "sim" / "metrics.jsonl")
    assert [r["round"] for r in records] == [0, 1, 20] and "accuracy" in records[-1]  # (1: the first batches)
    assert _records(tmp_path / "mpi" / "metrics.jsonl") == records
    assert ranks.stdout.splitlines() == sim.splitlines()  # DSGD and search_k too


@pytest.mark.torch
@pytest.mark.skipif(not HAS_TORCH, reason="needs torch and scikit-learn (the nn extra)")
def test_the_mnist_port_under_mpirun_equals_the_simulator(tmp_path, mpirun, capsys):
    """The PyTorch-script tutorial's example (mnist_port.py): Adadelta, StepLR per epoch, the training loss in
    every record, a test pass per epoch; the simulator and 2 ranks write the same records."""
    from mpi_teleport.examples import mnist_port

    flags = ["--epochs", "2", "--k", "1"]
    sim = _in_process(mnist_port.main, ["--nodes", "2", *flags, "--out", "sim"], tmp_path, capsys)
    ranks = mpirun(2, ["-m", "mpi_teleport.examples.mnist_port", "--mpi", *flags, "--out", "mpi"],
                   timeout=600, cwd=tmp_path)
    assert ranks.returncode == 0, ranks.stderr[-2000:]
    records = _records(tmp_path / "sim" / "metrics.jsonl")
    evaluated = [r["round"] for r in records if "accuracy" in r]
    assert evaluated == [0, 22, 44] and all("train_loss" in r for r in records[1:])
    assert _records(tmp_path / "mpi" / "metrics.jsonl") == records
    assert ranks.stdout.splitlines() == sim.splitlines()
