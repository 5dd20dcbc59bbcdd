"""The MPI command line with torch inside the ranks: ``run.main`` (what ``mpirun -n N
python -m mpi_teleport.run FLAGS`` calls, on COMM_WORLD) in the in-rank job, whose ranks
have imported torch already, equal to the simulator's command line (``sim.main``, rank 0)
record for record:

* the network (float32 tokens) with a bandwidth term in the virtual clock (a regression
  where the simulator's oracle charged 8 bytes per element while MPI sends 4);
* ``--optimizer adamw --weight-decay --betas`` (the API's equal: tests/test_settings_table.py);
* the real Fashion-MNIST, by the package's defaults and by the authors' recipe (Debian's
  dataset-fashion-mnist; skipped, saying so, where it is absent).

(Run inside the ranks by tests/test_in_rank.py. The command line's own process, its
exit codes and its one-line refusals under mpirun: tests/test_mpi.py, tests/test_failures.py.)"""
import contextlib
import io
import json
import tempfile
from pathlib import Path

import pytest
from mpi4py import MPI

from helpers import on_root, real_fashion_mnist, without_time
from mpi_teleport import run, sim
from mpi_teleport.disk.output import read_jsonl

RANKS = (4,)  # the rank counts tests/test_in_rank.py runs this file at (k = 2, 3 < n)

pytest.importorskip("torch")
COMM = MPI.COMM_WORLD
HAVE_REAL, NO_REAL = real_fashion_mnist()
needs_real = pytest.mark.skipif(not HAVE_REAL, reason=NO_REAL)


def both(flags: list[str]) -> tuple[Path, bool]:
    """run.main(flags) on every rank and sim.main(--nodes size + flags) on rank 0 (after:
    communicate first), into two directories of one temporary folder; (that folder,
    whether both returned 0 on every rank)."""
    base = Path(COMM.bcast(tempfile.mkdtemp(prefix="cli-") if COMM.rank == 0 else None))
    with contextlib.redirect_stdout(io.StringIO()):
        ok = run.main([*flags, "--out", str(base / "mpi")]) == 0
        if COMM.rank == 0:
            ok = ok and sim.main(["--nodes", str(COMM.size), *flags, "--out", str(base / "sim")]) == 0
    return base, COMM.allreduce(ok, op=MPI.LAND)


def records(path: Path) -> list[dict]:
    return without_time(read_jsonl(path))


@pytest.mark.mpi(min_size=2)
def test_the_digits_network_with_a_bandwidth_clock_equals_the_simulator():
    pytest.importorskip("sklearn")
    base, ok = both(["--problem", "digits", "--k", "3", "--topology", "base2", "--rounds", "20",
                     "--log-every", "5", "--lr", "0.05", "--momentum", "0.9", "--alpha", "0.5",
                     "--latency", "const:10,bw:1", "--clock", "virtual", "--compute-time", "50",
                     "--progress", "off"])

    def values(path):
        return [(r["round"], r["loss"], r["accuracy"], r["consensus"], r["virtual_time_s"])
                for r in read_jsonl(path)]

    def equal():
        for algorithm in ("teleportation", "dsgd"):
            ref = values(base / "sim" / algorithm / "metrics.jsonl")
            if not ([r[0] for r in ref] == [0, 1, 5, 10, 15, 20] and ref[-1][-1] > 0
                    and values(base / "mpi" / algorithm / "metrics.jsonl") == ref):
                return False  # (float32, bit for bit; round 1: the first batches)
        return True

    assert ok and on_root(COMM, equal)


@pytest.mark.mpi(min_size=2)
def test_the_command_lines_optimizer_under_mpi_equals_the_simulators():
    base, ok = both(["--k", "2", "--dim", "4", "--lr", "0.05", "--log-every", "2",
                     "--algorithm", "teleportation", "--progress", "off", "--optimizer", "adamw",
                     "--weight-decay", "0.05", "--betas", "0.8,0.99", "--rounds", "12"])

    def equal():
        described = {where: json.loads((base / where / "config.json").read_text())["optimizer"]
                     for where in ("sim", "mpi")}
        return (records(base / "mpi" / "metrics.jsonl") == records(base / "sim" / "metrics.jsonl")
                and described["mpi"] == described["sim"]
                and described["mpi"].startswith("AdamW(betas=(0.8, 0.99)"))

    assert ok and on_root(COMM, equal)


@needs_real
@pytest.mark.mpi(min_size=2)
def test_the_real_fashion_mnist_under_mpi_equals_the_simulator():
    base, ok = both(["--problem", "fashion-mnist", "--algorithm", "teleportation", "--k", "2",
                     "--rounds", "6", "--lr", "0.01", "--momentum", "0.9", "--alpha", "0.1",
                     "--sampling", "epochs", "--val-fraction", "0", "--log-every", "3",
                     "--progress", "off"])
    assert ok and on_root(COMM, lambda: records(base / "mpi" / "metrics.jsonl")
                         == records(base / "sim" / "metrics.jsonl"))


@needs_real
@pytest.mark.mpi(min_size=2)
def test_the_authors_recipe_on_the_real_data_under_mpi_equals_the_simulator():
    base, ok = both(["--problem", "mpi_teleport.problems.authors_recipe:authors",
                     "--algorithm", "teleportation", "--k", "2", "--rounds", "3", "--lr", "0.01",
                     "--momentum", "0.9", "--alpha", "0.1", "--sampling", "epochs",
                     "--val-fraction", "0", "--log-every", "3", "--progress", "off"])

    def equal():
        mpi = records(base / "mpi" / "metrics.jsonl")
        return (mpi == records(base / "sim" / "metrics.jsonl")
                and [r["round"] for r in mpi] == [0, 1, 3]
                and all("node_mean_accuracy" in r for r in mpi))  # (each evaluates k models)

    assert ok and on_root(COMM, equal)
