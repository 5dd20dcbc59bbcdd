"""Momentum travels with its token: after every hop the new holder's momentum equals the
one the previous holder computed (the simulator's per-token momentum row)."""
import numpy as np
import pytest
from mpi4py import MPI

from mpi_teleport.core import schedule
from mpi_teleport.runtime.backends.mpi import MpiBackend
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.core.spec import RunSpec
from mpi_teleport.runtime.transport import Transport

RANKS = (4,)  # the rank counts tests/test_in_rank.py runs this file at (it needs 3 ranks)
MPI_TIER = True  # transport semantics: under Open MPI and MPICH (else Open MPI only)


@pytest.mark.mpi(min_size=3)
def test_momentum_follows_its_token():
    comm = MPI.COMM_WORLD.Dup()
    n, k, rounds, mu = comm.Get_size(), 2, 12, 0.9
    problem = Quadratic(n=n, d=6, sigma2=1.0, zeta2=1.0, seed=4)
    spec = RunSpec("teleportation", n, k, rounds, 0.01, mu, "ring", "overlap", seed=4)
    node = MpiBackend(problem, spec, Transport(comm))
    node.begin(spec.phases()[0], 0, problem.initial())
    seen = []  # (round, token, momentum) held by this rank after each round
    for t in range(rounds):
        node.step(t)
        token = node.held[1]
        if token >= 0:
            seen.append((t + 1, token, node.state.v.copy()))
    everything = comm.gather(seen, root=0)
    rank = comm.Get_rank()
    comm.Free()
    if rank != 0:
        return
    # the simulator's momentum rows, token by token, round by round
    from mpi_teleport.core.algorithms import local_step
    from mpi_teleport.core.algorithms import mix
    from mpi_teleport.core import topology

    x = np.tile(problem.initial(), (k, 1))
    v = np.zeros_like(x)
    expected = {}
    for t in range(rounds):
        y = local_step(problem, schedule.holders(4, n, k, t), x, v, t, 0.01, mu)
        x = mix(topology.mixing("ring", k, t), y)
        for m in range(k):
            expected[(t + 1, m)] = v[m].copy()
    got = {(r, m): vec for part in everything for r, m, vec in part}
    assert set(got) == set(expected)
    for key, vec in got.items():
        assert np.array_equal(vec, expected[key]), key
    assert any(np.abs(vec).max() > 0 for vec in got.values())
