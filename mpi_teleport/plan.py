"""Who sends what to whom in a round: the pure per-round plan of Algorithms 1 and 3.

A *roster* is the list of holder arrays of every run in a round (one run for
Teleportation and DSGD; the concurrent candidates of Algorithm 2, phase 2, on disjoint
nodes). Given the rosters of consecutive rounds and the topology, a node's part of the
round is a pure function of (rosters, topology, node, t): which token it holds, where its
y and its momentum go, whom it receives from and with which weights. Nothing here talks
MPI or keeps state; the MPI back end posts exactly these messages, and the virtual-clock
oracle (:mod:`mpi_teleport.latency`) charges exactly these messages.

Ranks are node ids. A message from a node to itself is not a message: it stays in place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import topology as topo

_EMPTY = np.zeros(0, dtype=np.float64)


def role(roster: list[np.ndarray], node: int) -> tuple[int, int]:
    """(run, token) that ``node`` holds under ``roster``, or (-1, -1) when inactive."""
    for q, holders in enumerate(roster):
        m = int((holders == node).argmax())  # holders are distinct: one hit at most
        if holders[m] == node:
            return q, m
    return -1, -1


def max_inputs(topology: str, ks) -> int:
    """Most inputs any receiver sums in one round (sizes the receive buffers)."""
    most = 1
    for k in ks:
        for r in range(topo.period(topology, k)):
            w = topo.mixing(topology, k, r)
            most = max(most, w.k if w.complete else int(np.diff(w.indptr).max()))
    return most


@dataclass(frozen=True)
class OverlapStep:
    """One node's part of round t of Algorithm 3 (one communication phase).

    The holder of token m in round t steps (line 8) and sends y_m to the round-(t+1)
    holders of the tokens j with W(t)[j, m] > 0 (line 9); its momentum rides the self-edge
    m -> m to holders(t+1)[m]. The holder of j in round t+1 receives from the round-t
    holders of j's sources, in ascending token order, and sums with W(t)[j, :] (12-13).
    """

    t: int
    run: int  # run of the token held in round t (-1: inactive)
    token: int  # m, held in round t (-1)
    y_to: tuple[int, ...]  # nodes that receive y_m (line 9), self included when it is one
    momentum_to: int  # holders(t+1)[m] (-1 without a token)
    next_run: int  # run of the token held in round t+1 (-1)
    next_token: int  # j, held in round t+1 (-1)
    y_from: tuple[int, ...]  # nodes whose y enters x_j, ascending source token order
    weights: np.ndarray  # W(t)[j, sources], same order
    momentum_from: int  # holders(t)[j] (-1)


@dataclass(frozen=True)
class SimpleStep:
    """One node's part of round t of Algorithm 1 (fetch, step, gossip).

    Line 8: token m moves from ``prev[m]`` (its holder in round t-1, or round t itself at
    the start of a phase) to holders(t)[m]. Lines 11-13: the round-t holders exchange y
    along W(t) and sum in ascending token order.
    """

    t: int
    held_run: int  # the token this node holds on entry (with ``prev``), or -1
    held: int
    model_to: int  # where the held token goes (line 8), -1
    run: int  # run of the token held in round t (-1: inactive)
    token: int
    model_from: int  # its previous holder (-1)
    y_to: tuple[int, ...]
    y_from: tuple[int, ...]
    weights: np.ndarray


def overlap_step(topology: str, now: list[np.ndarray], nxt: list[np.ndarray], node: int,
                 t: int) -> OverlapStep:
    """Algorithm 3, round t, for ``node``; ``now``/``nxt`` are the rosters of t and t+1."""
    run, m = role(now, node)
    next_run, j = role(nxt, node)
    y_to: tuple[int, ...] = ()
    momentum_to = -1
    if m >= 0:
        w = topo.mixing(topology, len(now[run]), t)
        y_to = tuple(nxt[run][w.receivers(m)].tolist())
        momentum_to = int(nxt[run][m])
    y_from: tuple[int, ...] = ()
    weights, momentum_from = _EMPTY, -1
    if j >= 0:
        w = topo.mixing(topology, len(now[next_run]), t)
        sources, weights = w.row(j)
        y_from = tuple(now[next_run][sources].tolist())
        momentum_from = int(now[next_run][j])
    return OverlapStep(t, run, m, y_to, momentum_to, next_run, j, y_from, weights, momentum_from)


def simple_step(topology: str, prev: list[np.ndarray], now: list[np.ndarray], node: int,
                t: int) -> SimpleStep:
    """Algorithm 1, round t, for ``node``: tokens sit with ``prev`` on entry."""
    held_run, held = role(prev, node)
    run, m = role(now, node)
    model_to = int(now[held_run][held]) if held >= 0 else -1
    model_from = int(prev[run][m]) if m >= 0 else -1
    y_to: tuple[int, ...] = ()
    y_from: tuple[int, ...] = ()
    weights = _EMPTY
    if m >= 0:
        w = topo.mixing(topology, len(now[run]), t)
        holders = now[run]
        sources, weights = w.row(m)
        y_from = tuple(holders[sources].tolist())
        y_to = tuple(holders[w.receivers(m)].tolist())
    return SimpleStep(t, held_run, held, model_to, run, m, model_from, y_to, y_from, weights)


@dataclass(frozen=True)
class Messages:
    """Every message of one round, as parallel arrays (for the virtual-clock oracle).

    ``groups`` is a list of (senders, receivers) node arrays, each with distinct receivers
    (one slot of W per run): a receiver's clock takes the max over its messages. The
    receive order within a round never changes a max, so slots may be charged in any
    order. ``fetch``/``momentum`` are (senders, receivers) of the model moves of Alg. 1
    (line 8) and the momentum hops of Alg. 3.
    """

    compute: np.ndarray  # nodes that take a local step this round
    fetch: tuple[np.ndarray, np.ndarray] | None
    groups: list[tuple[np.ndarray, np.ndarray]]
    complete: list[tuple[np.ndarray, np.ndarray]]  # runs on the complete graph: (senders, receivers)
    momentum: tuple[np.ndarray, np.ndarray] | None


def round_messages(topology: str, variant: str, prev: list[np.ndarray] | None,
                   now: list[np.ndarray], nxt: list[np.ndarray], t: int,
                   momentum: bool) -> Messages:
    """All nodes' messages of round t. ``variant`` 'overlap' (Alg. 3: y goes from holders(t)
    to holders(t+1)) or 'simple' (Alg. 1: fetch from ``prev``, gossip within holders(t))."""
    groups, complete = [], []
    compute = np.concatenate(now) if len(now) > 1 else now[0]
    fetch = mom = None
    receivers_of = nxt if variant == "overlap" else now
    for q, senders in enumerate(now):
        receivers = receivers_of[q]
        w = topo.mixing(topology, len(senders), t)
        if w.complete:
            complete.append((senders, receivers))
            continue
        for rows, sources, _ in w.slots():
            groups.append((senders[sources], receivers[rows]))
    if variant == "simple":
        fetch = (np.concatenate(prev) if len(prev) > 1 else prev[0], compute)
    elif momentum:
        mom = (compute, np.concatenate(nxt) if len(nxt) > 1 else nxt[0])
    return Messages(compute, fetch, groups, complete, mom)
