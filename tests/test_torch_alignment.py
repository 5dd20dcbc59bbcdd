"""The same batch gives the same bits wherever its samples lie in memory (issue 47's
finding: with 40 test samples in chunks of 10 over 4 ranks, the round-0 evaluation loss
under MPI differed from the simulator's in its last digits). A CPU kernel splits its
vectorised loop by the buffer's address; a chunk read as a view into the whole test set
(the simulator) and the same chunk from a rank's own copy of its slice (MPI) then rounded
differently. Batches now start at aligned addresses (torch_data.aligned). In-process:
each rank's problem is built here as an MPI rank builds it (``local_nodes=[rank]``);
under mpirun the same comparison is tests/in_rank/test_torch_feel_mpi.py's."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpi_teleport as mt  # noqa: E402
from mpi_teleport.core.evaluation import chunk_slices  # noqa: E402
from mpi_teleport.problems.torch_data import ALIGNMENT, aligned, samples  # noqa: E402
from torch_toys import C, F, blobs  # noqa: E402

pytestmark = pytest.mark.torch


def net():
    return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                               torch.nn.Linear(8, C))


def problem(nodes, local=None, test=None):
    return mt.TorchProblem(net, blobs(96, 0), nodes=nodes, seed=1,
                           test=blobs(40, 1) if test is None else test, batch_size=4,
                           eval_batch_size=10, local_nodes=local)


def at_offset(array, offset):
    """A copy of ``array`` starting ``offset`` bytes past an aligned address."""
    buf = np.zeros(array.nbytes + ALIGNMENT * 2, np.uint8)
    start = (-buf.ctypes.data) % ALIGNMENT + offset
    out = np.frombuffer(buf.data, array.dtype, array.size, start).reshape(array.shape)
    out[...] = array
    return out


def test_each_ranks_slice_evaluates_to_the_whole_sets_rows_bit_for_bit():
    """The issue's case: 4 ranks, 40 test samples, chunks of 10, round 0's model."""
    whole = problem(4)
    vector = whole.initial()
    want = whole.evaluation_sums(vector)
    for rank, (lo, hi) in enumerate(chunk_slices(40, 10, 4)):
        mine = problem(4, local=[rank])
        got = mine.evaluation_sums(vector, lo, hi)
        assert got.tobytes() == want[lo // 10:hi // 10].tobytes(), rank
    assert whole.metrics_from_sums(want)["loss"] == whole.evaluate(vector[None])["loss"]


@pytest.mark.parametrize("offset", [4, 8, 20, 40, 60])  # (each failed before)
def test_a_test_set_anywhere_in_memory_gives_the_same_evaluation(offset):
    x, y = blobs(40, 1)
    here, there = problem(4, test=(x, y)), problem(4, test=(at_offset(x, offset), y))
    vector = here.initial()
    assert here.evaluation_sums(vector).tobytes() == there.evaluation_sums(vector).tobytes()


def test_batches_start_aligned_and_an_aligned_tensor_is_not_copied():
    x, y = blobs(40, 1)
    data = samples((at_offset(x, 20), y), "test")
    for lo in range(0, 40, 3):
        xb, yb = data.span(lo, min(lo + 3, 40))
        assert xb.data_ptr() % ALIGNMENT == 0 and yb.data_ptr() % ALIGNMENT == 0
        assert np.array_equal(xb.numpy(), x[lo:lo + 3])
        xb, _ = data.take(np.array([lo, 39 - lo]))
        assert xb.data_ptr() % ALIGNMENT == 0
    t = torch.zeros(8)
    assert aligned(t) is t
