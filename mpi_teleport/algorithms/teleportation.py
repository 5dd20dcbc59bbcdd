"""Teleportation on one rank (one node), Algorithms 1 and 3 of the paper.

Each rank runs the same loop; it evaluates the schedule locally and acts only where it
is a holder. Decentralized SGD is Algorithm 3 with the fixed placement holders(t)[m] = m
(DESIGN.md §1). Several independent runs may share the nodes (Algorithm 2, phase 2): the
placement then gives one holder array per run, on disjoint nodes, and each run gossips
over its own k tokens. The transport moves the vectors; nothing here knows about MPI.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import topology as topo
from ..transport import KIND_MODEL, KIND_MOMENTUM, KIND_Y
from . import local_step, lr_at, weighted_sum, work_buffer


@dataclass
class Node:
    """What one rank needs: its id, the problem, how to place tokens, and a transport.

    ``placement(t)`` returns holders(t) (one run) or a list of them (concurrent runs on
    disjoint nodes, Alg. 2); ``k`` is informational for one run."""

    rank: int
    problem: object
    transport: object
    placement: Callable[[int], object]
    k: int
    topology: str
    lr: object  # a float, or t -> step size (algorithms.learning_rate)
    momentum: float

    def roster(self, t: int) -> list[np.ndarray]:
        """Holder arrays of every run in round t."""
        placed = self.placement(t)
        return placed if isinstance(placed, list) else [placed]

    def role(self, roster: list[np.ndarray]) -> tuple[int, int]:
        """(run, token) this node holds under ``roster``, or (-1, -1) when inactive."""
        for q, holders in enumerate(roster):
            m = int((holders == self.rank).argmax())  # holders are distinct: one hit at most
            if holders[m] == self.rank:
                return q, m
        return -1, -1

    def mixing(self, roster: list[np.ndarray], q: int, t: int) -> topo.Mixing:
        return topo.mixing(self.topology, len(roster[q]), t)


class TokenState:
    """The token a rank holds: model x, momentum v, and work buffers (allocated once)."""

    def __init__(self, d: int, momentum: bool, max_inputs: int, dtype=np.float64):
        self.x = np.zeros(d, dtype)
        self.y = np.zeros(d, dtype)
        self.v = np.zeros(d, dtype) if momentum else None
        self.v_in = np.zeros(d, dtype) if momentum else None
        self.inbox = [np.zeros(d, dtype) for _ in range(max_inputs)]
        self.work = work_buffer(d, dtype)  # one block of the weighted sum

    def mix_into_x(self, weights, inputs) -> None:
        """x = sum_s weights[s] * inputs[s] (Alg. 1 line 13 / Alg. 3 line 13), in place."""
        weighted_sum(weights, inputs, self.x, self.work)


def max_inputs(topology: str, ks) -> int:
    """Most inputs any receiver sums in one round (sizes the receive buffers)."""
    most = 1
    for k in ks:
        for r in range(topo.period(topology, k)):
            w = topo.mixing(topology, k, r)
            most = max(most, w.k if w.complete else int(np.diff(w.indptr).max()))
    return most


def _step(node: Node, state: TokenState, t: int) -> None:
    local_step(node.problem, [node.rank], state.x[None], None if state.v is None
               else state.v[None], t, lr_at(node.lr, t), node.momentum, out=state.y[None])


def run_overlap(node: Node, rounds: range, state: TokenState, on_round, fresh: bool = False) -> None:
    """Algorithm 3: one communication phase per round.

    The holder of token m in round t sends y_m straight to the round-(t+1) holders of the
    tokens j with W(t)[j, m] > 0 (line 9); the holder of j in round t+1 receives them and
    sums x_j = sum_m W(t)[j, m] y_m (lines 12-13). Momentum rides the self-edge m -> m.
    ``state`` holds this rank's round-``rounds.start`` token (if any) on entry (also when
    ``fresh``: in this algorithm tokens always sit with the current round's holders).
    ``on_round(r, roster_r, x_or_None, run)`` is called after each round r = t + 1 with
    the token this rank now holds; it returns True to stop the run.
    """
    tr, me = node.transport, node.rank
    now = node.roster(rounds.start)
    run, mine = node.role(now)
    nxt = node.roster(rounds.start + 1)
    run_next, j = node.role(nxt)
    for t in rounds:
        pending, tag_y = None, tr.tag(t, KIND_Y)
        # A rank that is its own successor on an edge keeps what it would send itself: its
        # y is the input (no copy), its momentum stays (the self-edge of DSGD, or a token
        # whose holder is active in two consecutive rounds).
        if j >= 0:  # line 12, posted before computing so the data can arrive meanwhile
            sources, weights = node.mixing(nxt, run_next, t).row(j)
            came_from = now[run_next][sources].tolist()
            inputs = [state.y if src == me else state.inbox[s] for s, src in enumerate(came_from)]
            recvs = [(src, tag_y, state.inbox[s]) for s, src in enumerate(came_from) if src != me]
            momentum_from = int(now[run_next][j])
            if state.v is not None and momentum_from != me:
                recvs.append((momentum_from, tr.tag(t, KIND_MOMENTUM), state.v_in))
            pending = tr.post_recvs(recvs)
        if mine >= 0:  # lines 8-9
            _step(node, state, t)
            goes_to = nxt[run][node.mixing(now, run, t).receivers(mine)].tolist()
            sends = [(dest, tag_y, state.y) for dest in goes_to if dest != me]
            momentum_to = int(nxt[run][mine])
            if state.v is not None and momentum_to != me:
                sends.append((momentum_to, tr.tag(t, KIND_MOMENTUM), state.v))
            pending = tr.post_sends(sends, pending)
        after = node.roster(t + 2)  # next round's line 5, evaluated while the messages travel
        run_after, j_after = node.role(after)
        if pending is not None:
            tr.wait(pending)
        if j >= 0:  # line 13, summed in ascending token order
            state.mix_into_x(weights, inputs)
            if state.v is not None and momentum_from != me:
                state.v, state.v_in = state.v_in, state.v
        now, run, mine = nxt, run_next, j
        nxt, run_next, j = after, run_after, j_after
        if on_round(t + 1, now, state.x if mine >= 0 else None, run):
            return


def run_simple(node: Node, rounds: range, state: TokenState, on_round, fresh: bool = False) -> None:
    """Algorithm 1: fetch the token from its previous holder (line 8), take an SGD step
    (line 10), then gossip among the round-t holders (lines 12-13). Two phases per round.
    On entry the round-``rounds.start`` tokens sit with holders(rounds.start - 1), or with
    holders(rounds.start) when that is 0 or ``fresh`` (new tokens placed by new_state).
    Runs keep their token ids across rounds.
    """
    tr = node.transport
    first = rounds.start
    prev = node.roster(first) if first == 0 or fresh else node.roster(first - 1)
    run_held, held = node.role(prev)
    for t in rounds:
        now = node.roster(t)
        run, mine = node.role(now)
        # line 8: x_m moves from holders(t-1)[m] to holders(t)[m] (a local copy if the same)
        sends, recvs = [], []
        if held >= 0:
            dest = int(now[run_held][held])
            sends.append((dest, tr.tag(t, KIND_MODEL), state.x))
            if state.v is not None:
                sends.append((dest, tr.tag(t, KIND_MOMENTUM), state.v))
        if mine >= 0:
            source = int(prev[run][mine])
            recvs.append((source, tr.tag(t, KIND_MODEL), state.y))
            if state.v is not None:
                recvs.append((source, tr.tag(t, KIND_MOMENTUM), state.v_in))
        tr.exchange(sends, recvs)
        if mine >= 0:
            state.x, state.y = state.y, state.x
            if state.v is not None:
                state.v, state.v_in = state.v_in, state.v
            _step(node, state, t)  # line 10
            # lines 11-13: exchange y with the neighbours' holders, sum in token order
            w = node.mixing(now, run, t)
            sources, weights = w.row(mine)
            holders = now[run]
            recvs = [(int(holders[m]), tr.tag(t, KIND_Y), state.inbox[s]) for s, m in enumerate(sources)]
            sends = [(int(holders[r]), tr.tag(t, KIND_Y), state.y) for r in w.receivers(mine)]
            tr.exchange(sends, recvs)
            state.mix_into_x(weights, state.inbox[:len(sources)])
        prev, run_held, held = now, run, mine
        if on_round(t + 1, now, state.x if held >= 0 else None, run_held):
            return


def new_state(node: Node, x0: np.ndarray, start: int = 0) -> TokenState:
    """State at round ``start``: the round's holders start from x0 (all replicas equal)."""
    roster = node.roster(start)
    state = TokenState(len(x0), node.momentum > 0, max_inputs(node.topology, [len(h) for h in roster]),
                       x0.dtype)
    if node.role(roster)[1] >= 0:
        state.x[...] = x0
    return state
