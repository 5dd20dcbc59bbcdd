"""The examples shipped in mpi_teleport/examples/ run as their docstrings say, and give the
same numbers in this process and under mpirun (mpi_teleport/DESIGN.md §7).

* logistic.py: the numpy Problem through the API (its main() here, and ``python -m
  mpi_teleport.examples.logistic --mpi`` under mpirun; through the command lines,
  ``--problem mpi_teleport.examples.logistic:problem``: tests/test_api.py);
* custom_model.py: a user's torch model, its main() here; under MPI (``--mpi`` on 4 ranks,
  the same table and metrics.jsonl) and mnist_port.py, the PyTorch-script tutorial's port of
  the official MNIST example: tests/in_rank/test_examples_mpi.py.
"""
from __future__ import annotations

import contextlib
from pathlib import Path


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


# The torch examples under MPI (custom_model.py, mnist_port.py, ported_script.py), each
# equal to its one-process run: tests/in_rank/test_examples_mpi.py.

