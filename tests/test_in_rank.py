"""Runs the tests that live inside MPI ranks (tests/in_rank/, pytest-mpi) under mpirun from
the normal pytest command: one job per rank count, each running every in-rank file that
declares that count (``RANKS = (...)`` at its top). Files that declare ``MPI_TIER = True``
(the transport's own semantics) run under Open MPI and MPICH, the others under Open MPI
only (MPI_TELEPORT_TEST_MPICH=all: under both).

pytest-timeout's thread method fires even inside a blocked MPI call, and ``python -m
mpi4py`` aborts all ranks when one fails; the job itself has the harness's hard timeout.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from launch_helpers import IMPLEMENTATIONS

IN_RANK = Path(__file__).resolve().parent / "in_rank"


def declared(path: Path) -> tuple[tuple[int, ...], bool]:
    """(RANKS, MPI_TIER) of an in-rank file, read without importing it (importing mpi4py
    here would initialise MPI in the pytest process)."""
    values = {target.id: ast.literal_eval(node.value)
              for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
              for target in node.targets
              if isinstance(target, ast.Name) and target.id in ("RANKS", "MPI_TIER")}
    assert "RANKS" in values, f"{path.name} does not say at which rank counts it runs (RANKS = ...)"
    return tuple(values["RANKS"]), bool(values.get("MPI_TIER", False))


FILES = {p.name: declared(p) for p in sorted(IN_RANK.glob("test_*.py"))}
RANK_COUNTS = sorted({r for ranks, _ in FILES.values() for r in ranks})


def files_for(ranks: int, impl_name: str) -> list[str]:
    every = impl_name == IMPLEMENTATIONS[0] or os.environ.get("MPI_TELEPORT_TEST_MPICH") == "all"
    return [f"tests/in_rank/{name}" for name, (counts, tier) in FILES.items()
            if ranks in counts and (tier or every)]


OUTCOME = r"\d+ (?:passed|failed|skipped|errors?|deselected|warnings?|xfailed|xpassed)"
SUMMARY = re.compile(rf"((?:{OUTCOME})(?:, {OUTCOME})*) in \d+(?:\.\d+)?s")


def summaries(stdout: str) -> list[dict[str, int]]:
    """Every rank's pytest summary ('3 passed, 2 skipped in 1.20s') as {outcome: count},
    found anywhere in the job's output (the launcher may join two ranks' lines into one)."""
    return [{word: int(n) for n, word in re.findall(r"(\d+) ([a-z]+)", m.group(1))}
            for m in SUMMARY.finditer(stdout)]


@pytest.mark.mpi_tier
@pytest.mark.timeout(900)
@pytest.mark.parametrize("ranks", RANK_COUNTS)
def test_in_rank_suite(mpirun, mpi_impl, ranks):
    files = files_for(ranks, mpi_impl.name)
    if not files:
        pytest.skip(f"{mpi_impl.name}: no in-rank file of the MPI tier runs on {ranks} ranks")
    # (rank 0 computes the simulator's records inside the job on purpose: no MpiJobWarning)
    proc = mpirun(ranks, ["-m", "mpi4py", "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi",
                          "-q", "--color=no", "--timeout=300", "--timeout-method=thread",
                          "-W", "ignore::mpi_teleport.runtime.collective.MpiJobWarning",
                          *files, "-o", "addopts="], timeout=840)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    counts = summaries(proc.stdout)
    assert len(counts) == ranks, f"expected a summary from each of {ranks} ranks:\n{proc.stdout[-3000:]}"
    for c in counts:  # every rank ran tests, and none failed
        assert c.get("passed", 0) >= 1 and not c.get("failed") and not c.get("error") \
            and not c.get("errors"), proc.stdout[-3000:]
    assert len({tuple(sorted(c.items())) for c in counts}) == 1, proc.stdout[-3000:]


def test_every_in_rank_file_is_run():
    """A file in tests/in_rank/ that no job runs would pass silently."""
    for name, (counts, tier) in FILES.items():
        assert counts and all(isinstance(r, int) and r >= 1 for r in counts), name
