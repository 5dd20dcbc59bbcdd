"""One plan: every node's messages of a round as the virtual-clock oracle charges them
(plan.round_messages) are exactly the messages of all nodes' plan steps (plan.overlap_step,
plan.simple_step), which the round executors post. Every topology, k = 1, k = n, DSGD, a
user topology and both phases of Algorithm 2. Serial and fast."""
from __future__ import annotations

import numpy as np
import pytest

from mpi_teleport.core import plan
from mpi_teleport.core import topology as topo
from mpi_teleport.core.spec import RunSpec


def pairs(senders, receivers) -> set:
    return set(zip(np.asarray(senders).tolist(), np.asarray(receivers).tolist()))


def charged(msgs: plan.Messages) -> set:
    """(sender, receiver) of every y message the oracle charges."""
    out = set()
    for senders, receivers in msgs.groups:
        out |= pairs(senders, receivers)
    for senders, receivers in msgs.complete:
        out |= {(s, r) for s in senders.tolist() for r in receivers.tolist()}
    return out


def check_round(topology, phase, n: int, t: int) -> None:
    now, nxt = phase.roster(t), phase.roster(t + 1)
    prev = now if phase.is_placement_round(t) else phase.roster(t - 1)
    over = [plan.overlap_step(topology, now, nxt, node, t) for node in range(n)]
    simple = [plan.simple_step(topology, prev, now, node, t) for node in range(n)]
    sent = {(p_node, d) for p_node, p in enumerate(over) for d in p.y_to}
    received = {(s, p_node) for p_node, p in enumerate(over) for s in p.y_from}
    msgs = plan.round_messages(topology, "overlap", None, now, nxt, t, momentum=True)
    assert charged(msgs) == sent == received, (topology, t)
    assert pairs(*msgs.momentum) == {(i, p.momentum_to) for i, p in enumerate(over) if p.token >= 0}
    assert sorted(msgs.compute.tolist()) == [i for i, p in enumerate(over) if p.token >= 0]

    sent = {(i, d) for i, p in enumerate(simple) for d in p.y_to}
    received = {(s, i) for i, p in enumerate(simple) for s in p.y_from}
    msgs = plan.round_messages(topology, "simple", prev, now, nxt, t, momentum=True)
    assert charged(msgs) == sent == received, (topology, t)
    assert pairs(*msgs.fetch) == {(i, p.model_to) for i, p in enumerate(simple) if p.held >= 0}
    assert msgs.momentum is None  # Alg. 1: the momentum moves with the model (fetch)


@pytest.mark.parametrize("topology", topo.TOPOLOGIES)
@pytest.mark.parametrize("algorithm,n,k", [("teleportation", 7, 1), ("teleportation", 7, 7),
                                           ("teleportation", 12, 5), ("dsgd", 6, None),
                                           ("search", 7, None)])
def test_oracle_messages_are_the_steps_messages(topology, algorithm, n, k):
    for phase in RunSpec(algorithm, n, k, 6, 0.1, topology=topology, seed=3).phases():
        for t in range(phase.start, phase.stop):
            check_round(topology, phase, n, t)


def test_user_topology():
    def alternating(k, t):
        return np.eye(k) if t % 2 == 0 else np.full((k, k), 1.0 / k)

    phase = RunSpec("teleportation", 6, 4, 6, 0.1, topology=alternating).phases()[0]
    for t in range(6):
        check_round(alternating, phase, 6, t)
