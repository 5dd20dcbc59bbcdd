"""Evaluation shared by the ranks equals the simulator's bit for bit on 4 ranks
(tests/in_rank/, run inside the ranks), and the pure helpers it rests on."""
from mpi_teleport.core.evaluation import chunk_slices


def test_chunk_slices_cover_the_set_in_order():
    for n in (0, 1, 49, 50, 51, 360, 1000):
        for parts in (1, 2, 3, 4, 7):
            s = chunk_slices(n, 50, parts)
            assert len(s) == parts and s[0][0] == 0 and s[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(s, s[1:]))
            assert all(lo % 50 == 0 or lo == n for lo, _ in s)


# (under mpirun with 4 ranks: tests/in_rank/test_shared_evaluation_mpi.py, run by
# tests/test_in_rank.py)
