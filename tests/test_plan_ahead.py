"""Rounds planned ahead (plan.overlap_block / plan.simple_block) equal the round-by-round
plan (plan.overlap_step / plan.simple_step) for every node and round: every topology,
k = 1, k = n, DSGD, and the concurrent runs of Algorithm 2. Serial and fast."""
from __future__ import annotations

import numpy as np
import pytest

from mpi_teleport.core import plan
from mpi_teleport.core import topology as topo
from mpi_teleport.core.spec import RunSpec


def same_overlap(a: plan.OverlapStep, b: plan.OverlapStep) -> bool:
    return (a.t, a.run, a.token, a.y_to, a.momentum_to, a.next_run, a.next_token, a.y_from,
            a.momentum_from) == (b.t, b.run, b.token, b.y_to, b.momentum_to, b.next_run,
                                 b.next_token, b.y_from, b.momentum_from) \
        and np.array_equal(a.weights, b.weights)


def same_simple(a: plan.SimpleStep, b: plan.SimpleStep) -> bool:
    return (a.t, a.held_run, a.held, a.model_to, a.run, a.token, a.model_from, a.y_to,
            a.y_from) == (b.t, b.held_run, b.held, b.model_to, b.run, b.token, b.model_from,
                          b.y_to, b.y_from) and np.array_equal(a.weights, b.weights)


def prev_roster(phase, t):
    """Where Alg. 1's round-t tokens sit on entry (as plan.entry_rosters, round by round)."""
    if t == phase.start and (phase.fresh or t == 0):
        return phase.roster(t)
    return phase.roster(t - 1)


def check_phase(topology, phase, nodes: int, t0: int, length: int) -> None:
    rounds = range(t0, t0 + length)
    rosters = [phase.roster(t) for t in range(t0, t0 + length + 1)]
    prevs = [prev_roster(phase, t) for t in rounds]
    for node in range(nodes):
        over = plan.overlap_block(topology, rosters, node, t0)
        simple = plan.simple_block(topology, prevs, rosters[:-1], node, t0)
        assert len(over) == len(simple) == length
        for i, t in enumerate(rounds):
            want = plan.overlap_step(topology, rosters[i], rosters[i + 1], node, t)
            assert same_overlap(over.step(i), want), (topology, node, t)
            want = plan.simple_step(topology, prevs[i], rosters[i], node, t)
            assert same_simple(simple.step(i), want), (topology, node, t)


@pytest.mark.parametrize("topology", topo.TOPOLOGIES)
@pytest.mark.parametrize("n,k", [(7, 1), (7, 7), (12, 5), (16, 16), (2, 2), (1, 1)])
def test_teleportation_block_equals_rounds(topology, n, k):
    phase = RunSpec("teleportation", n, k, 40, 0.1, topology=topology, seed=3).phases()[0]
    check_phase(topology, phase, n, 0, 17)  # from round 0 (Alg. 1's fresh start)
    check_phase(topology, phase, n, 23, 9)  # a later block (periods cut mid-way)


@pytest.mark.parametrize("topology", topo.TOPOLOGIES)
def test_dsgd_block_equals_rounds(topology):
    n = 9
    phase = RunSpec("dsgd", n, None, 30, 0.1, topology=topology).phases()[0]
    check_phase(topology, phase, n, 0, 12)


@pytest.mark.parametrize("topology", topo.TOPOLOGIES)
@pytest.mark.parametrize("n", [3, 7, 10, 25])
def test_search_phases_block_equal_rounds(topology, n):
    """Algorithm 2: phase 1 (k = n), phase 2 (candidates concurrently on disjoint nodes,
    a fresh start), including the block that begins where phase 2 begins."""
    T = 8
    first, second = RunSpec("search", n, None, T, 0.1, topology=topology, seed=5).phases()
    check_phase(topology, first, n, 0, T)
    check_phase(topology, second, n, T, T)
    check_phase(topology, second, n, T + 3, 4)


def test_user_topology_block_equals_rounds():
    def alternating(k, t):  # the identity on even rounds, J/k on odd ones
        return np.eye(k) if t % 2 == 0 else np.full((k, k), 1.0 / k)

    phase = RunSpec("teleportation", 6, 4, 20, 0.1, topology=alternating).phases()[0]
    check_phase(alternating, phase, 6, 0, 9)


def test_block_weights_are_the_rows_of_w():
    """A receiver's padded weights are W(t)[j, sources] followed by zeros."""
    phase = RunSpec("teleportation", 8, 8, 10, 0.1, topology="base2").phases()[0]
    rosters = [phase.roster(t) for t in range(0, 6)]
    block = plan.overlap_block("base2", rosters, 3, 0)
    for i in range(5):
        nf = block.n_from[i]
        assert np.all(block.weights[i, nf:] == 0) and np.all(block.y_from[i, nf:] == -1)
        assert block.weights[i, :nf].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("algorithm,k", [("teleportation", 3), ("teleportation", 1),
                                         ("teleportation", 9), ("dsgd", None),
                                         ("search", None)])
def test_phase_rosters_in_one_call_equal_the_rosters_of_each_round(algorithm, k):
    """Phase.rosters (a block of rounds from schedule.holders_block / search_order_block,
    what the MPI back end plans from) equals the round-by-round rosters side by side, in
    every phase, from any first round."""
    spec = RunSpec(algorithm, 9, k, 40, 0.1, seed=4)
    for phase in spec.phases():
        assert phase.block is not None
        for t0, t1 in ((phase.start, phase.stop), (phase.start + 7, phase.start + 8),
                       (phase.stop - 3, phase.stop + 2)):
            want = np.array([np.concatenate(phase.roster(t)) for t in range(t0, t1)])
            got = phase.rosters(t0, t1)
            assert got.dtype == np.int64 and np.array_equal(got, want), (algorithm, t0, t1)
