"""Tokens as torch tensors (backends/device.py): on CPU tensors, and on a CUDA device
where one is visible (pinned host buffers staged to the GPU), the momentum step and the
gossip sum give the numbers of the numpy path bit for bit, and a whole MPI run with
device tokens records what the host path records (tests/in_rank/, under mpirun). The
CUDA cases are skipped on a machine without a GPU (CI's); they ran on an H200
(the manual's Performance page, "GPU")."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mpi_teleport.core.algorithms import Nesterov, local_step, weighted_sum, work_buffer  # noqa: E402
from mpi_teleport.runtime.backends import device  # noqa: E402


class Linear:
    """g = A x + b, deterministic in (node, t)."""

    def __init__(self, d, dtype):
        gen = np.random.default_rng(0)
        self.a = gen.standard_normal(d).astype(dtype)
        self.b = gen.standard_normal(d).astype(dtype)

    def gradient(self, nodes, x, t, out=None):
        out = np.empty_like(x) if out is None else out
        np.multiply(x, self.a * (t + 1 + nodes[0]), out=out)
        out += self.b
        return out


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


@pytest.mark.parametrize("where", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("momentum", [0.0, 0.9, Nesterov(0.9)])
def test_device_step_and_sum_equal_the_host_arithmetic_bit_for_bit(dtype, momentum, where):
    d, gen = 1000, np.random.default_rng(1)
    problem = Linear(d, dtype)
    s = device.DeviceTokenState(d, momentum > 0, dtype, where)
    assert s.staged == (where != "cpu") and s.tensor(s.x).device.type == where
    x = gen.standard_normal(d).astype(dtype)
    v = gen.standard_normal(d).astype(dtype)
    s.x[...] = x
    if momentum:
        s.v[...] = v
    host_v = v[None].copy() if momentum else None
    for t in range(3):  # a few steps and sums, chained
        want_y = local_step(problem, [2], s.x[None].copy(), host_v, t, 0.05, momentum,
                            out=np.empty((1, d), dtype))[0]
        device.local_step(problem, 2, s, t, 0.05, momentum)
        assert np.array_equal(s.y, want_y)
        if momentum:
            assert np.array_equal(s.v, host_v[0])
        inbox = s.inboxes(3)
        for i, buf in enumerate(inbox[:2]):
            buf[...] = gen.standard_normal(d).astype(dtype)
        inputs = [inbox[0], s.y, inbox[1]]
        weights = [0.2, 0.45, 0.35]
        want = weighted_sum(weights, [a.copy() for a in inputs], np.empty(d, dtype),
                            work_buffer(d, dtype))
        device.weighted_sum(weights, inputs, s)
        assert np.array_equal(s.x, want)
    if where == "cpu":
        assert s.tensor(s.x).data_ptr() == s.x.ctypes.data  # CPU: the tensor is the wire
    else:  # a GPU: the wire is pinned host memory, the tensor the device's copy
        assert torch.from_numpy(s.x).is_pinned() and torch.equal(s.tensor(s.x).cpu(), torch.from_numpy(s.x))


def test_swapped_buffers_keep_their_tensors():
    s = device.DeviceTokenState(4, True, np.float32, "cpu")
    s.x, s.y = s.y, s.x
    s.y[...] = 3
    assert torch.equal(s.tensor(s.y), torch.full((4,), 3.0))
    with pytest.raises(ValueError):
        s.tensor(np.zeros(4, np.float32))


# (under mpirun: tests/in_rank/test_device_tokens_mpi.py, run by tests/test_in_rank.py)


def test_a_batch_reaches_another_device_in_the_standard_layout():
    """A one-channel batch taken from the whole data set has strides (64, 1, 8, 1), which
    read as channels-last; a rank's share gives (64, 8, 8, 1). Copied to another device
    both get the standard layout (on a GPU the first ran other convolution kernels, so the
    simulator and MPI differed in the last bits); on its own device a batch is left as it
    is (the CPU's numbers are unchanged). The "meta" device stands in for a GPU."""
    from mpi_teleport.problems.torch_data import to_device

    whole = torch.as_strided(torch.arange(16 * 64, dtype=torch.float32), (16, 1, 8, 8), (64, 1, 8, 1))
    share = torch.as_strided(torch.arange(16 * 64, dtype=torch.float32), (16, 1, 8, 8), (64, 8, 8, 1))
    assert whole.is_contiguous(memory_format=torch.channels_last)
    for batch in (whole, share):
        assert to_device(batch, "meta").stride() == (64, 64, 8, 1)
        assert to_device(batch, "cpu") is batch
        assert to_device((batch, batch), "meta")[1].stride() == (64, 64, 8, 1)
        assert to_device({"x": batch}, "cpu")["x"] is batch
