"""Algorithms 1 and 3, one round at one node: the paper's pseudo-code over a transport.

This is the canonical statement of what a node does in a round. Line numbers are those
of the paper's pseudo-code, counting every line its ``algorithmic`` environment numbers
(mpi_teleport/DESIGN.md §2). The node's part of the round comes from the plan
(:class:`~mpi_teleport.core.plan.OverlapStep`, :class:`~mpi_teleport.core.plan.SimpleStep`: whom
it sends to and receives from, with which weights); the vectors move through a
:class:`~mpi_teleport.core.interfaces.TokenTransport` as per-round messages whose tags name
the round, so no message can be taken for another round's.

The MPI back end runs these functions under the latency layer (every message carries a
clock stamp) and with device tokens. On a plain transport it runs their compiled
equivalent (:mod:`mpi_teleport.runtime.backends.compiled`: the same messages through persistent
channels, the same sums in the same order); tests/test_executors.py checks the two and
the simulator against each other bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, cast

import numpy as np

from ..interfaces import KIND_MODEL, KIND_MOMENTUM, KIND_Y, TokenTransport
from ..plan import OverlapStep, SimpleStep


@dataclass
class Node:
    """One node as a round sees it: its id, its transport, its token buffers ``state``
    (``x``, ``y``, ``v``, ``v_in``, ``inboxes(count)``: a
    :class:`~mpi_teleport.runtime.backends.tokens.TokenState`) and the round's arithmetic on them:
    ``local_step(t)`` writes y = x - lr g into ``state.y`` (heavy ball: updates
    ``state.v``), ``weighted_sum(weights, inputs)`` writes the sum of weights[s] *
    inputs[s], added in the given order, into ``state.x``; ``prepare(t)`` starts the part
    of round t's local step that needs no x (the problem's ``prepare``: an iterator, or
    None), done while the node waits for messages: under Algorithm 3 round t - 1's, under
    Algorithm 1 its own model's move in round t."""

    rank: int
    transport: TokenTransport
    state: Any
    local_step: Callable[[int], None]
    weighted_sum: Callable[[np.ndarray, list[np.ndarray]], None]
    prepare: Callable[[int], Any] | None = None


def overlap_round(node: Node, p: OverlapStep, t: int) -> None:
    """Algorithm 3 (Teleportation with communication overlap), round t, at this node.

    The holder of token m in round t steps and sends y_m to the round-(t+1) holders of
    the tokens that mix it (lines 7-9); the holder of token j in round t+1 receives those
    and sums them (lines 11-13). One communication phase. A node that is its own
    successor on an edge keeps its y (and momentum) in place instead of messaging itself.
    """
    tr, me, s = node.transport, node.rank, node.state
    tag_y, tag_v = tr.tag(t, KIND_Y), tr.tag(t, KIND_MOMENTUM)
    holds_now = p.token >= 0  # line 7: v_i is active in round t, holding token m
    holds_next = p.next_token >= 0  # line 11: v_i is active in round t+1, holding token j
    # Momentum is never averaged: token j's v rides the self-edge j -> j from its round-t
    # holder; it stays in place when that holder is this node.
    momentum_arrives = s.v is not None and holds_next and p.momentum_from != me
    pending = inputs = None
    if holds_next:
        # line 12: receive y_m from holders(t)[m] for every m with W(t)[j, m] > 0,
        # posted before line 8 so that the data can arrive while this node computes
        inbox = s.inboxes(len(p.y_from))
        inputs = [s.y if src == me else inbox[i] for i, src in enumerate(p.y_from)]
        recvs = [(src, tag_y, inbox[i]) for i, src in enumerate(p.y_from) if src != me]
        if momentum_arrives:
            recvs.append((p.momentum_from, tag_v, s.v_in))
        pending = tr.post_recvs(recvs)
    if holds_now:
        node.local_step(t)  # line 8: y_m = x_m - eta grad F_i(x_m; xi_i)
        # line 9: send y_m to holders(t+1)[j] for every j with W(t)[j, m] > 0
        sends = [(dest, tag_y, s.y) for dest in p.y_to if dest != me]
        if s.v is not None and p.momentum_to != me:
            sends.append((p.momentum_to, tag_v, s.v))
        pending = tr.post_sends(sends, pending)
    if pending is not None:
        if holds_next and node.prepare is not None:
            # round t+1's line 8 at this node, the part that needs no x (its gradient
            # noise), while the messages travel; the step does what is left
            work = node.prepare(t + 1)
            if work is not None:
                tr.meanwhile(pending, work)
        tr.wait(pending)
    if holds_next:
        # line 13: x_j = sum_m W(t)[j, m] y_m, ascending m (inputs: set above, holds_next)
        node.weighted_sum(p.weights, cast(list[np.ndarray], inputs))
        if momentum_arrives:
            s.v, s.v_in = s.v_in, s.v


def simple_round(node: Node, p: SimpleStep, t: int) -> None:
    """Algorithm 1 (the simple version), round t, at this node: fetch the token from its
    previous holder (lines 6-8), step (line 10), gossip among the round-t holders (lines
    11-12). Two communication phases, the second waiting for the first."""
    tr, s = node.transport, node.state
    tag_x, tag_v = tr.tag(t, KIND_MODEL), tr.tag(t, KIND_MOMENTUM)
    # lines 6-8: x of token m moves from its holder in round t-1 (this node, if it held
    # m on entry) to holders(t)[m], its momentum with it; a local copy when both are this
    # node. At a placement round (the run's first, a fresh phase's) the tokens already
    # sit with holders(t): every move is a local copy.
    sends, recvs = [], []
    if p.held >= 0:
        sends.append((p.model_to, tag_x, s.x))
        if s.v is not None:
            sends.append((p.model_to, tag_v, s.v))
    if p.token >= 0:  # line 5: v_i is active in round t; its token lands in y, then swaps
        recvs.append((p.model_from, tag_x, s.y))
        if s.v is not None:
            recvs.append((p.model_from, tag_v, s.v_in))
    pending = tr.post_recvs(recvs)
    tr.post_sends(sends, pending)
    if p.token >= 0 and p.model_from != node.rank and node.prepare is not None:
        # line 10's part that needs no x (its gradient noise) while the model travels
        work = node.prepare(t)
        if work is not None:
            tr.meanwhile(pending, work)
    tr.wait(pending)
    if p.token < 0:
        return
    s.x, s.y = s.y, s.x
    if s.v is not None:
        s.v, s.v_in = s.v_in, s.v
    node.local_step(t)  # line 10: y_i = x_i - eta grad F_i(x_i; xi_i)
    # line 11: receive y_j from the round-t holders of the neighbouring tokens (and send
    # this node's y to them; to itself, a local copy)
    tag_y = tr.tag(t, KIND_Y)
    inbox = s.inboxes(len(p.y_from))
    recvs = [(src, tag_y, inbox[i]) for i, src in enumerate(p.y_from)]
    sends = [(dest, tag_y, s.y) for dest in p.y_to]
    tr.exchange(sends, recvs)
    node.weighted_sum(p.weights, inbox[:len(p.y_from)])  # line 12: x_i = sum_j W(t)[i, j] y_j
