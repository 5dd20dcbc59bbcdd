"""Evaluation shared by the ranks equals the simulator's bit for bit for 1, 2, 3 and 4
ranks (tests/mpi_scale, run inside the ranks), and the pure helpers it rests on."""
import pytest

from mpi_teleport.evaluation import chunk_slices

pytestmark = pytest.mark.one_mpi  # MPI-implementation specifics: tests/test_mpi.py and the MPI tier


def test_chunk_slices_cover_the_set_in_order():
    for n in (0, 1, 49, 50, 51, 360, 1000):
        for parts in (1, 2, 3, 4, 7):
            s = chunk_slices(n, 50, parts)
            assert len(s) == parts and s[0][0] == 0 and s[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(s, s[1:]))
            assert all(lo % 50 == 0 or lo == n for lo, _ in s)


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_shared_evaluation_under_mpirun_equals_the_simulator(mpirun, ranks):
    proc = mpirun(ranks, ["-m", "mpi4py", "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi",
                          "-q", "tests/mpi_scale/test_shared_evaluation_mpi.py", "-o", "addopts="],
                  timeout=500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
