"""Who sends what to whom in a round: the pure per-round plan of Algorithms 1 and 3.

A *roster* is the list of holder arrays of every run in a round (one run for
Teleportation and DSGD; the concurrent candidates of Algorithm 2, phase 2, on disjoint
nodes). Given the rosters of consecutive rounds and the topology, a node's part of the
round is a pure function of (rosters, topology, node, t): which token it holds, where its
y and its momentum go, whom it receives from and with which weights. Nothing here talks
MPI or keeps state. One plan, in three shapes, each for its reader:

* :func:`overlap_step` / :func:`simple_step`: one node, one round (:class:`OverlapStep`,
  :class:`SimpleStep`): the definition, and what the round executor
  (:mod:`mpi_teleport.core.algorithms.teleport`) reads;
* :func:`overlap_block_flat` / :func:`simple_block_flat`: one node, a block of rounds,
  as integer arrays in a few vectorised numpy calls (what the MPI back end plans with);
  row i equals the step of round t0 + i (tests/test_plan_ahead.py);
* :func:`round_messages`: every node's messages of one round, as arrays (what the
  virtual-clock oracle, :mod:`mpi_teleport.latency.virtual_clock`, charges); the same edges as
  the steps of all nodes (tests/test_plan_messages.py).

Ranks are node ids. A message from a node to itself is not a message: it stays in place.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np

from . import topology as topo
from .topology import Floats, Ints, Mixing, Topology
from .schedule import Phase, flat_rosters

_EMPTY = np.zeros(0, dtype=np.float64)


def role(roster: list[Ints], node: int) -> tuple[int, int]:
    """(run, token) that ``node`` holds under ``roster``, or (-1, -1) when inactive."""
    for q, holders in enumerate(roster):
        m = int((holders == node).argmax())  # holders are distinct: one hit at most
        if holders[m] == node:
            return q, m
    return -1, -1


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
    weights: Floats  # W(t)[j, sources], same order
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
    weights: Floats


def overlap_step(topology: Topology, now: list[Ints], nxt: list[Ints], node: int,
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


def simple_step(topology: Topology, prev: list[Ints], now: list[Ints], node: int,
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

    compute: Ints  # nodes that take a local step this round
    fetch: tuple[Ints, Ints] | None
    groups: list[tuple[Ints, Ints]]
    complete: list[tuple[Ints, Ints]]  # runs on the complete graph: (senders, receivers)
    momentum: tuple[Ints, Ints] | None


def round_messages(topology: Topology, variant: str, prev: list[Ints] | None,
                   now: list[Ints], nxt: list[Ints], t: int,
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
        prev = cast(list[Ints], prev)  # (Alg. 1 rounds are given their previous holders)
        fetch = (np.concatenate(prev) if len(prev) > 1 else prev[0], compute)
    elif momentum:
        mom = (compute, np.concatenate(nxt) if len(nxt) > 1 else nxt[0])
    return Messages(compute, fetch, groups, complete, mom)


# -- rounds planned ahead ------------------------------------------------------------------
# The same plan for a block of consecutive rounds, as integer arrays (one row per round),
# computed in one vectorised pass per (run, mixing matrix): the MPI back end then posts
# from arrays instead of rebuilding Python objects every round. Row i of a block equals
# overlap_step / simple_step of round t0 + i (tests/test_plan_ahead.py); lists are padded
# with -1 (nodes) and 0.0 (weights), their lengths in the n_* columns.


@dataclass(frozen=True)
class OverlapBlock:
    """Algorithm 3 for one node over rounds t0 .. t0 + len - 1 (fields as in OverlapStep)."""

    t0: int
    run: Ints  # (B,)
    token: Ints
    y_to: Ints  # (B, width), -1 padded
    n_to: Ints  # (B,)
    momentum_to: Ints
    next_run: Ints
    next_token: Ints
    y_from: Ints  # (B, width), -1 padded, ascending source token order
    weights: Floats  # (B, width), 0 padded
    n_from: Ints
    momentum_from: Ints

    def __len__(self) -> int:
        return len(self.run)

    def step(self, i: int) -> OverlapStep:
        """Row i as the round-by-round OverlapStep."""
        nt, nf = int(self.n_to[i]), int(self.n_from[i])
        return OverlapStep(self.t0 + i, int(self.run[i]), int(self.token[i]),
                           tuple(self.y_to[i, :nt].tolist()), int(self.momentum_to[i]),
                           int(self.next_run[i]), int(self.next_token[i]),
                           tuple(self.y_from[i, :nf].tolist()), self.weights[i, :nf],
                           int(self.momentum_from[i]))


@dataclass(frozen=True)
class SimpleBlock:
    """Algorithm 1 for one node over rounds t0 .. t0 + len - 1 (fields as in SimpleStep)."""

    t0: int
    held_run: Ints
    held: Ints
    model_to: Ints
    run: Ints
    token: Ints
    model_from: Ints
    y_to: Ints
    n_to: Ints
    y_from: Ints
    weights: Floats
    n_from: Ints

    def __len__(self) -> int:
        return len(self.run)

    def step(self, i: int) -> SimpleStep:
        nt, nf = int(self.n_to[i]), int(self.n_from[i])
        return SimpleStep(self.t0 + i, int(self.held_run[i]), int(self.held[i]),
                          int(self.model_to[i]), int(self.run[i]), int(self.token[i]),
                          int(self.model_from[i]), tuple(self.y_to[i, :nt].tolist()),
                          tuple(self.y_from[i, :nf].tolist()), self.weights[i, :nf])


@functools.lru_cache(maxsize=64)
def _columns(sizes: tuple[int, ...]) -> tuple[Ints, Ints, Ints]:
    """Each column's run and token, and each run's first column, for runs of ``sizes``."""
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    col_run = np.repeat(np.arange(len(sizes)), sizes)
    col_tok = np.concatenate([np.arange(k) for k in sizes])
    for a in (offsets, col_run, col_tok):
        a.flags.writeable = False
    return col_run, col_tok, offsets


def _roles(flat: Ints, col_run: Ints, col_tok: Ints,
           node: int) -> tuple[Ints, Ints]:
    """(run, token) of ``node`` in every roster (rows of ``flat``); -1 where inactive."""
    rows, cols = np.nonzero(flat == node)  # holders are distinct: one hit per row at most
    runs = np.full(len(flat), -1, dtype=np.int64)
    toks = np.full(len(flat), -1, dtype=np.int64)
    runs[rows], toks[rows] = col_run[cols], col_tok[cols]
    return runs, toks


def _groups(topology: Topology, sizes: tuple[int, ...], runs: Ints,
            t0: int) -> Iterator[tuple[int, Ints, Mixing]]:
    """Rows (rounds) grouped by (run, mixing matrix): yields (q, rows, W)."""
    t = None
    for q, k in enumerate(sizes):
        mine = np.flatnonzero(runs == q) if len(sizes) > 1 else np.flatnonzero(runs >= 0)
        if len(mine) == 0:
            continue
        period = None if callable(topology) else topo.period(topology, k)
        if period == 1:  # a static graph: one matrix for all rows
            yield q, mine, topo.mixing(topology, k, t0)
            continue
        if t is None:
            t = t0 + np.arange(len(runs))
        keys = t[mine] if period is None else t[mine] % period  # a user's W may change every round
        for key in np.unique(keys):
            rows = mine[keys == key]
            yield q, rows, topo.mixing(topology, k, int(t[rows[0]]))


def _gather_nodes(flat_rows: Ints, offset: int, tokens: Ints) -> Ints:
    """flat_rows[i, offset + tokens[i, c]] where tokens >= 0, else -1."""
    picked = np.take_along_axis(flat_rows, offset + np.maximum(tokens, 0), axis=1)
    return np.where(tokens >= 0, picked, -1)


def overlap_block(topology: Topology, rosters: list[list[Ints]], node: int,
                  t0: int) -> OverlapBlock:
    """Algorithm 3 for ``node`` in rounds t0 .. t0 + B - 1; ``rosters`` are the B + 1
    rosters of rounds t0 .. t0 + B."""
    return overlap_block_flat(topology, flat_rosters(rosters), tuple(len(h) for h in rosters[0]),
                              node, t0)


def overlap_block_flat(topology: Topology, flat: Ints, sizes: tuple[int, ...], node: int,
                       t0: int) -> OverlapBlock:
    """:func:`overlap_block` from the B + 1 rosters as one array (:func:`flat_rosters`)."""
    col_run, col_tok, offsets = _columns(sizes)
    runs, toks = _roles(flat, col_run, col_tok, node)
    B = len(flat) - 1
    now, nxt = flat[:B], flat[1:]
    run, token, next_run, next_token = runs[:B], toks[:B], runs[1:], toks[1:]
    to_groups = list(_groups(topology, sizes, run, t0))
    from_groups = list(_groups(topology, sizes, next_run, t0))
    width = max([1] + [w.padded()[0].shape[1] for _, _, w in to_groups + from_groups])
    y_to = np.full((B, width), -1, dtype=np.int64)
    y_from = np.full((B, width), -1, dtype=np.int64)
    weights = np.zeros((B, width))
    n_to, n_from = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    momentum_to, momentum_from = np.full(B, -1, dtype=np.int64), np.full(B, -1, dtype=np.int64)
    for q, rows, w in to_groups:
        src, wts, n_src, rcv, n_rcv = w.padded()
        m = token[rows]
        y_to[rows, :rcv.shape[1]] = _gather_nodes(nxt[rows], offsets[q], rcv[m])
        n_to[rows] = n_rcv[m]
        momentum_to[rows] = nxt[rows, offsets[q] + m]
    for q, rows, w in from_groups:
        src, wts, n_src, rcv, n_rcv = w.padded()
        j = next_token[rows]
        y_from[rows, :src.shape[1]] = _gather_nodes(now[rows], offsets[q], src[j])
        n_from[rows] = n_src[j]
        momentum_from[rows] = now[rows, offsets[q] + j]
        weights[rows, :wts.shape[1]] = wts[j]
    return OverlapBlock(t0, run, token, y_to, n_to, momentum_to, next_run, next_token,
                        y_from, weights, n_from, momentum_from)


def simple_block(topology: Topology, prevs: list[list[Ints]], nows: list[list[Ints]],
                 node: int, t0: int) -> SimpleBlock:
    """Algorithm 1 for ``node`` in rounds t0 .. t0 + B - 1: ``prevs[i]`` is where the tokens
    of round t0 + i sit on entry, ``nows[i]`` its roster."""
    return simple_block_flat(topology, flat_rosters(prevs), flat_rosters(nows),
                             tuple(len(h) for h in nows[0]), node, t0)


def simple_block_flat(topology: Topology, pflat: Ints, flat: Ints,
                      sizes: tuple[int, ...], node: int, t0: int) -> SimpleBlock:
    """:func:`simple_block` from the rosters as arrays (:func:`flat_rosters`): ``pflat``
    row i where round t0 + i's tokens sit on entry, ``flat`` row i its roster."""
    col_run, col_tok, offsets = _columns(sizes)
    held_run, held = _roles(pflat, col_run, col_tok, node)
    run, token = _roles(flat, col_run, col_tok, node)
    B = len(flat)
    ii = np.arange(B)
    model_to = np.where(held >= 0, flat[ii, offsets[np.maximum(held_run, 0)] + held], -1)
    model_from = np.where(token >= 0, pflat[ii, offsets[np.maximum(run, 0)] + token], -1)
    groups = list(_groups(topology, sizes, run, t0))
    width = max([1] + [w.padded()[0].shape[1] for _, _, w in groups])
    y_to = np.full((B, width), -1, dtype=np.int64)
    y_from = np.full((B, width), -1, dtype=np.int64)
    weights = np.zeros((B, width))
    n_to, n_from = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    for q, rows, w in groups:
        src, wts, n_src, rcv, n_rcv = w.padded()
        m = token[rows]
        here = flat[rows]
        y_from[rows, :src.shape[1]] = _gather_nodes(here, offsets[q], src[m])
        y_to[rows, :rcv.shape[1]] = _gather_nodes(here, offsets[q], rcv[m])
        weights[rows, :wts.shape[1]] = wts[m]
        n_from[rows], n_to[rows] = n_src[m], n_rcv[m]
    return SimpleBlock(t0, held_run, held, model_to, run, token, model_from, y_to, n_to,
                       y_from, weights, n_from)


def entry_rosters(phase: Phase, t0: int, t1: int) -> Ints:
    """Where Algorithm 1's tokens of rounds t0 .. t1 - 1 sit on entry (line 8 fetches them
    from there), one row per round: the previous round's roster, or the round's own in a
    placement round (:meth:`~mpi_teleport.core.schedule.Phase.is_placement_round`)."""
    if phase.is_placement_round(t0):  # (only a phase's first round can be one)
        rows = phase.rosters(t0, t1)
        return np.concatenate([rows[:1], rows[:-1]])
    return phase.rosters(t0 - 1, t1 - 1)
