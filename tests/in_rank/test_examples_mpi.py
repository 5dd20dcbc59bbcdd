"""The torch examples shipped in mpi_teleport/examples/ under MPI, inside the in-rank job's
ranks (which have imported torch already): each example's ``main(["--mpi", ...])`` -- what
``mpirun -n 4 python -m mpi_teleport.examples.NAME --mpi`` runs, one node per rank -- prints
and writes what its ``main(["--nodes", "4", ...])`` does in one process (rank 0):

* custom_model.py: a user's torch model; the same table and metrics.jsonl (``time_s`` aside);
* mnist_port.py: the PyTorch-script tutorial's port of the official MNIST example
  (Adadelta, StepLR per epoch, the training loss in every record, a test pass per epoch);
* ported_script.py: issue 22's port of plain_script.py (CNN, augmentation, weight decay,
  cosine lr, a CSV log and a custom metric): the same records and CSV log.

(Run inside the ranks by tests/test_in_rank.py; the examples in one process, their docstrings
and line counts: tests/test_examples.py, tests/test_ported_example.py.)"""
import contextlib
import csv
import io
import tempfile
from pathlib import Path

import pytest
from mpi4py import MPI

from helpers import on_root, without_time
from mpi_teleport.disk.output import read_jsonl

RANKS = (4,)  # the rank counts tests/test_in_rank.py runs this file at

pytest.importorskip("torch")
pytest.importorskip("sklearn")
COMM = MPI.COMM_WORLD


def both(main, flags: list[str]) -> tuple[Path, str, str, bool]:
    """main(--mpi + flags) on every rank, then main(--nodes size + flags) on rank 0, each
    writing into its own directory (--out) of one temporary folder: (that folder, what
    rank 0 printed under MPI, what it printed alone, whether both returned 0 everywhere)."""
    base = Path(COMM.bcast(tempfile.mkdtemp(prefix="example-") if COMM.rank == 0 else None))
    ranks, alone = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(ranks):
        ok = main(["--mpi", *flags, "--out", str(base / "mpi")]) == 0
    if COMM.rank == 0:
        with contextlib.redirect_stdout(alone):
            ok = ok and main(["--nodes", str(COMM.size), *flags, "--out", str(base / "sim")]) == 0
    return base, ranks.getvalue(), alone.getvalue(), COMM.allreduce(ok, op=MPI.LAND)


def records(path: Path) -> list[dict]:
    return without_time(read_jsonl(path))


@pytest.mark.mpi(min_size=2)
def test_custom_model_under_mpi_equals_the_simulator():
    from mpi_teleport.examples import custom_model

    base, ranks, alone, ok = both(custom_model.main, ["--rounds", "20"])

    def equal():
        want = records(base / "sim" / "metrics.jsonl")
        return ([r["round"] for r in want] == [0, 1, 20] and "accuracy" in want[-1]  # (1: the first batches)
                and records(base / "mpi" / "metrics.jsonl") == want
                and ranks.splitlines() == alone.splitlines() and len(alone.splitlines()) == 3)

    assert ok and on_root(COMM, equal)  # (DSGD's and search_k's lines too)


@pytest.mark.mpi(min_size=2)
def test_the_mnist_port_under_mpi_equals_the_simulator():
    from mpi_teleport.examples import mnist_port

    base, ranks, alone, ok = both(mnist_port.main, ["--epochs", "2", "--k", "1"])

    def equal():
        want = records(base / "sim" / "metrics.jsonl")
        evaluated = [r["round"] for r in want if "accuracy" in r]
        return (evaluated == [0, 22, 44] and all("train_loss" in r for r in want[1:])
                and records(base / "mpi" / "metrics.jsonl") == want
                and ranks.splitlines() == alone.splitlines())

    assert ok and on_root(COMM, equal)


@pytest.mark.mpi(min_size=2)
def test_the_ported_script_under_mpi_equals_the_simulator():
    from mpi_teleport.examples import ported_script

    base, _, _, ok = both(ported_script.main, ["--epochs", "1", "--k", "2"])

    def equal():
        want = read_jsonl(base / "sim" / "metrics.jsonl")
        with open(base / "sim" / "log.csv") as a, open(base / "mpi" / "log.csv") as b:
            same_log = without_time(csv.DictReader(a)) == without_time(csv.DictReader(b))
        return ([r["round"] for r in want] == [0, 1, 22] and "macro_f1" in want[0]
                and records(base / "mpi" / "metrics.jsonl") == without_time(want) and same_log)

    assert ok and on_root(COMM, equal)
