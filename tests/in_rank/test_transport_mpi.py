"""Transport tests that run inside MPI ranks (launched by tests/test_in_rank.py).

Every test communicates first and asserts after, so one failing rank cannot leave the
others blocked in a collective; ``python -m mpi4py`` aborts all ranks on a failure."""
import numpy as np
import pytest
from mpi4py import MPI

from mpi_teleport.runtime.transport import KIND_MOMENTUM, KIND_Y, Transport

RANKS = (2, 4)  # the rank counts tests/test_in_rank.py runs this file at
MPI_TIER = True  # transport semantics: under Open MPI and MPICH (else Open MPI only)


@pytest.fixture
def transport():
    comm = MPI.COMM_WORLD.Dup()
    yield Transport(comm)
    comm.Free()


@pytest.mark.mpi(min_size=2)
def test_ring_exchange_and_self_copy(transport):
    r, size = transport.rank, transport.size
    send = np.full(5, float(r))
    got_prev, got_self = np.empty(5), np.empty(5)
    transport.exchange(
        sends=[((r + 1) % size, transport.tag(0, KIND_Y), send), (r, transport.tag(0, KIND_MOMENTUM), send)],
        recvs=[((r - 1) % size, transport.tag(0, KIND_Y), got_prev), (r, transport.tag(0, KIND_MOMENTUM), got_self)],
    )
    assert (got_prev == (r - 1) % size).all()
    assert (got_self == r).all()


@pytest.mark.mpi(min_size=2)
def test_rounds_never_mix(transport):
    """Messages of rounds 0..4 from the same peer, received in reverse round order."""
    r, size = transport.rank, transport.size
    dest, source = (r + 1) % size, (r - 1) % size
    bufs = [np.full(3, 100.0 * t + r) for t in range(5)]
    inbox = [np.empty(3) for _ in range(5)]
    pending = transport.post_recvs([(source, transport.tag(t, KIND_Y), inbox[t]) for t in reversed(range(5))])
    transport.post_sends([(dest, transport.tag(t, KIND_Y), bufs[t]) for t in range(5)], pending)
    transport.wait(pending)
    for t in range(5):
        assert (inbox[t] == 100.0 * t + source).all()


@pytest.mark.mpi(min_size=3)
def test_gather_rows_in_token_order(transport):
    size = transport.size
    holders = np.array([size - 1, 0, 1])  # token 0 on the last rank, ...
    mine = np.flatnonzero(holders == transport.rank)
    row = np.full(4, float(mine[0])) if len(mine) else None
    rows = transport.gather_rows(row, holders, 4)
    if transport.rank == 0:
        assert rows.shape == (3, 4)
        assert (rows == np.arange(3)[:, None]).all()
    else:
        assert rows is None


@pytest.mark.mpi(min_size=2)
def test_schedule_agrees_on_every_rank(transport):
    from mpi_teleport.core import schedule

    mine = np.concatenate([schedule.holders(9, 1000, 32, t) for t in range(20)])
    everyone = transport.comm.allgather(mine.tolist())
    assert all(other == everyone[0] for other in everyone)
