"""Algorithms 1 and 3 compiled: the MPI back end's fast path on a transport with
persistent channels (:class:`~mpi_teleport.core.interfaces.ChannelTransport`).

The round executor (:mod:`mpi_teleport.core.algorithms.teleport`) is the definition: every
round it reads the node's plan step and posts that round's messages. Here a block of
rounds planned at once (:func:`mpi_teleport.core.plan.overlap_block_flat`,
:func:`~mpi_teleport.core.plan.simple_block_flat`) is compiled into one *record* per round:
the persistent channels to start (created once, bound to a buffer and a peer), the
arrays the local step reads and writes, the inputs and weights of the gossip sum, and
whether buffers swap. A round then starts channels, steps, waits and sums: no planning,
no allocation, no per-peer Python work. The messages, the sums and their order are the
round executor's, so the numbers are too (tests/test_executors.py: this, the round
executor and the simulator, bit for bit, over a thread loopback).

Two facts make records reusable across rounds:

* **Patterns repeat.** A node's part of a round is one row of integers (its roles, peers,
  weights): rounds with the same row share one record, found by the row's bytes.
* **Buffers only ever swap roles.** An arriving momentum lands in ``v_in`` and swaps
  with ``v`` (Alg. 3's momentum hop); under Alg. 1 an arriving model lands in ``y`` and
  swaps with ``x``, its momentum alike. A channel is bound to a buffer, so a record is
  built for the arrangement of the buffers in its round: the canonical one or the swapped
  one, by the parity of the swaps so far (a cumulative sum over the block). The parity is
  part of the record's key.
"""
from __future__ import annotations

import bisect
from typing import Callable, NamedTuple, cast

import numpy as np

from ...core.algorithms import local_step, local_step_columns, steps_by_columns, weighted_sum
from ...core.interfaces import KIND_MODEL, KIND_MOMENTUM, KIND_Y, ChannelTransport
from ...trace.spans import HANDOVER, POST, PREPARE, SEND, STEP, SUM, WAIT
from ..transport import PIPELINE_BYTES

# Compiled round records kept (by pattern); a run with more distinct patterns rebuilds
# records (cheap: table lookups), it never grows without bound.
RECORDS_KEPT = 1 << 14


class Blocks(NamedTuple):
    """A pipelined step or sum: ``columns[i]`` is block i's slice of the token, and
    ``requests[i]`` the pieces to start once block i is stepped (a step) or to complete
    before block i is summed (a sum)."""

    columns: list
    requests: list


def column_blocks(d: int, channels: list, least: int, send: bool) -> Blocks | None:
    """The blocks of a pipelined step (``send``: its sends) or sum (its receives) over
    ``channels``, each a (requests, spans) pair from the transport: a block ends at a
    piece's end, at least ``least`` columns after the previous one, or at d. A send's
    piece joins the first block that reaches its end (all its data computed), a receive's
    the block holding its start (the first to read its data). None when no channel is in
    pieces (nothing to pipeline)."""
    if not any(len(requests) > 1 for requests, _ in channels):
        return None
    ends: list[int] = []
    for stop in sorted({stop for _, spans in channels for _, stop in spans}):
        if stop - (ends[-1] if ends else 0) >= least and stop < d:
            ends.append(stop)
    ends.append(d)
    blocks = Blocks([slice(a, b) for a, b in zip([0] + ends[:-1], ends)], [[] for _ in ends])
    for requests, spans in channels:
        for request, (start, stop) in zip(requests, spans):
            block = bisect.bisect_left(ends, stop) if send else bisect.bisect_right(ends, start)
            blocks.requests[block].append(request)
    return blocks


class OverlapRecord(NamedTuple):
    """One round of Algorithm 3 as channels and arrays (``CompiledRounds.overlap``)."""

    recvs: list  # line 12: channels filling the gossip inputs (and the arriving momentum)
    sends: list  # lines 8-9: y to the gossip peers (and the momentum on its hop)
    both: list  # recvs + sends, completed together
    step_args: tuple | None  # (x, v, y) row views of local_step; None: no token to step
    inputs: list  # line 13: the gossip sum's inputs, in ascending token order
    weights: np.ndarray  # their weights, in the token's dtype
    swap: bool  # a momentum arrived: v and v_in swap after the sum
    step_blocks: Blocks | None  # the step by columns, each block's pieces sent after it
    sum_blocks: Blocks | None  # the sum by columns, each block's pieces received first
    rest: list  # with sum_blocks: the requests of ``both`` that no block waits for


class SimpleRecord(NamedTuple):
    """One round of Algorithm 1 as channels and arrays (``CompiledRounds.simple``)."""

    fetch: list  # line 8: the model (and momentum) moving to this round's holder
    moved: bool  # a model arrived: x and y (v and v_in) swap before the step
    step_args: tuple | None  # (x, v, y) row views of local_step; None: no token to step
    gossip: list  # line 11: gossip receives and sends, completed together
    inputs: list  # line 12: the gossip sum's inputs, in ascending token order
    weights: np.ndarray  # their weights, in the token's dtype
    gossip_recvs: list  # the receives of ``gossip`` (pipelined: started before the step)
    step_blocks: Blocks | None  # as OverlapRecord's
    sum_blocks: Blocks | None
    rest: list


# A node's plan row for one round, as compiled (``CompiledRounds.records``): the four role
# columns (HEAD), the counts of gossip destinations and sources, then y_to and y_from
# padded to the block's width, the weights (as int64 bits, width), and the arrangement's
# parity last.
HEAD, N_TO, N_FROM, LISTS = slice(0, 4), 4, 5, 6


def _row_keys(rows: np.ndarray) -> list[bytes]:
    """Each row of an int64 matrix as its bytes (one numpy call for the whole block)."""
    keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel().tolist()
    return cast(list[bytes], keys)  # (numpy's stubs: a void item may be a tuple; not here)


class CompiledRounds:
    """Compiles blocks of one node's plan into round records and runs them.

    ``state`` is the node's :class:`~mpi_teleport.runtime.backends.tokens.TokenState` (host
    buffers: channels move numpy arrays), ``problem`` and ``spec`` give the local step.
    :meth:`overlap` / :meth:`simple` run one round of Algorithm 3 / 1 from its record.
    """

    column_block_bytes: int | None = None  # (tests pipeline small tokens with less)
    # A trace's span buffer while the current round is recorded (the back end sets it every
    # round), else None: then each part of the round pays one ``is not None`` test
    spans = None

    def __init__(self, problem, spec, transport: ChannelTransport, rank: int, state,
                 overlap: bool):
        self.problem, self.spec, self.transport, self.rank = problem, spec, transport, rank
        self.state, self._alg3 = state, overlap
        self._nodes = [rank]  # local_step's holders: this node alone
        self._prepare = getattr(problem, "prepare", None)  # the x-free part of a step, early
        self._records: dict[bytes, OverlapRecord | SimpleRecord] = {}
        # pipelining large tokens: the transport says how its channels are cut; the step
        # goes by columns when the problem's gradient is element-wise. A block is at least
        # the transport's pipeline_bytes of the token (PIPELINE_BYTES, 1 MiB: 8 ms on a
        # 1 Gbit/s link, well under a millisecond to compute, 40 blocks a 40 MB token)
        block = self.column_block_bytes
        if block is None:
            block = getattr(transport, "pipeline_bytes", PIPELINE_BYTES)
        self._spans = getattr(transport, "channel_spans", None) if block else None
        self._by_columns = steps_by_columns(problem, spec.step_rule)
        self._least = max(1, block // state.x.itemsize)
        # a test of requests just started: MPI moves data only inside its calls, so a
        # block's pieces go to the network while the next block is computed, not at the
        # round's wait
        self._poke = getattr(transport, "testall", None)
        s = state
        x, y, v, v_in = s.x, s.y, s.v, s.v_in
        swapped = [x, y, v_in, v] if overlap else [y, x, v_in, v]
        # the buffers in their roles [x, y, v, v_in] at swap parity 0 and 1, and their
        # row views (local_step takes rows of a matrix)
        self._arrangements = [[x, y, v, v_in], swapped]
        self._views = [[None if a is None else a[None] for a in arrangement]
                       for arrangement in self._arrangements]

    def parity(self) -> int:
        """The state's arrangement now: 0 canonical, 1 swapped."""
        s = self.state
        if self._alg3:
            return int(s.v is not None and s.v is not self._arrangements[0][2])
        return int(s.x is not self._arrangements[0][0])

    def forget(self) -> None:
        """Drop every record (their channels were bound to a communicator that is gone:
        elastic mode's recovery); the next block compiles its rounds again."""
        self._records.clear()

    # -- compiling ---------------------------------------------------------------------
    def records(self, block) -> list:
        """One record per round of ``block`` (a plan.OverlapBlock or SimpleBlock of this
        node), starting from the state's arrangement now; rounds with the same plan row
        and arrangement share one record."""
        me, momentum = self.rank, self.state.v is not None
        make: Callable[..., OverlapRecord | SimpleRecord]
        if self._alg3:
            columns = [block.token, block.momentum_to, block.next_token, block.momentum_from,
                       block.n_to, block.n_from]
            # a momentum from another node swaps v and v_in (Alg. 3's momentum hop)
            swaps = (block.next_token >= 0) & (block.momentum_from != me) if momentum else None
            make = self._overlap_record
        else:
            columns = [block.held, block.model_to, block.token, block.model_from,
                       block.n_to, block.n_from]
            swaps = (block.token >= 0) & (block.model_from != me)  # a model that arrives
            make = self._simple_record
        start = self.parity()
        if swaps is None:
            parity = np.full(len(block), start, dtype=np.int64)
        else:  # the arrangement each round starts in: swaps of the rounds before it
            parity = (start + np.cumsum(swaps) - swaps) % 2
        weights = np.ascontiguousarray(block.weights)
        rows = np.column_stack(columns + [block.y_to, block.y_from, weights.view(np.int64),
                                          parity])
        keys = _row_keys(rows)
        cache = self._records
        if len(cache) > RECORDS_KEPT:
            cache.clear()
        get = cache.get
        records = [get(key) for key in keys]
        if None in records:  # new patterns: build each once (rounds of this block share too)
            width = block.y_to.shape[1]
            token_weights = weights.astype(self.state.x.dtype)  # rounded to the token's dtype once
            for i, record in enumerate(records):
                if record is None:
                    key = keys[i]
                    record = get(key)
                    if record is None:
                        row = rows[i].tolist()
                        y_to = row[LISTS:LISTS + row[N_TO]]
                        y_from = row[LISTS + width:LISTS + width + row[N_FROM]]
                        record = cache[key] = make(row[HEAD], y_to, y_from,
                                                   token_weights[i, :row[N_FROM]], row[-1])
                    records[i] = record
        return records

    def _gossip_inputs(self, y_from, y) -> tuple[list, list, list]:
        """The inputs of a gossip sum in source order (this node's own y where it is a
        source, else a receive buffer), the receive channels that fill them, and each
        channel with its pieces' spans."""
        inbox, me, tr = self.state.inboxes(len(y_from)), self.rank, self.transport
        inputs, recvs, channels = [], [], []
        for i, src in enumerate(y_from):
            if src == me:
                inputs.append(y)
            else:
                inputs.append(inbox[i])
                channel = tr.recv_channel(inbox[i], src, KIND_Y)
                recvs += channel
                channels.append((channel, self._spans(inbox[i], src) if self._spans else None))
        return inputs, recvs, channels

    def _y_sends(self, y, y_to) -> tuple[list, list]:
        """The send channels of y to ``y_to`` (not to this node), and each with its spans."""
        tr, me = self.transport, self.rank
        channels = [(tr.send_channel(y, dest, KIND_Y), self._spans(y, dest) if self._spans else None)
                    for dest in y_to if dest != me]
        return [c for channel, _ in channels for c in channel], channels

    def _pipelines(self, send_channels, recv_channels, late_sends, d):
        """The blocks of a pipelined step (sending y) and sum (receiving its inputs), or
        None each: only where the transport gives spans and a channel is in pieces, the
        step only for an element-wise gradient. ``late_sends`` (the momentum) go after the
        last block."""
        if self._spans is None:
            return None, None
        step_blocks = sum_blocks = None
        if self._by_columns and send_channels:
            step_blocks = column_blocks(d, send_channels, self._least, send=True)
            if step_blocks is not None:
                step_blocks.requests[-1].extend(late_sends)
        if recv_channels:
            sum_blocks = column_blocks(d, recv_channels, self._least, send=False)
        return step_blocks, sum_blocks

    @staticmethod
    def _rest(both, sum_blocks) -> list:
        """The requests of ``both`` no block of the sum completes (all: no pipelined sum)."""
        if sum_blocks is None:
            return both
        waited = {id(r) for requests in sum_blocks.requests for r in requests}
        return [r for r in both if id(r) not in waited]

    def _overlap_record(self, head, y_to, y_from, weights, parity) -> OverlapRecord:
        """A round of Alg. 3 (algorithms.teleport.overlap_round) as channels and arrays."""
        token, momentum_to, next_token, momentum_from = head
        tr, me = self.transport, self.rank
        x, y, v, v_in = self._arrangements[parity]
        recvs: list = []  # channels
        sends: list = []
        inputs: list = []  # arrays
        send_channels: list = []
        recv_channels: list = []
        late: list = []
        swap = False
        if next_token >= 0:  # line 12
            inputs, recvs, recv_channels = self._gossip_inputs(y_from, y)
            if v is not None and momentum_from != me:
                recvs += tr.recv_channel(v_in, momentum_from, KIND_MOMENTUM)
                swap = True
        step_args = None
        if token >= 0:  # lines 8-9
            sends, send_channels = self._y_sends(y, y_to)
            if v is not None and momentum_to != me:
                late = tr.send_channel(v, momentum_to, KIND_MOMENTUM)
                sends += late
            xv, yv, vv, _ = self._views[parity]
            step_args = (xv, vv, yv)
        step_blocks, sum_blocks = self._pipelines(send_channels, recv_channels, late, x.size)
        both = recvs + sends
        return OverlapRecord(recvs, sends, both, step_args, inputs, weights, swap,
                             step_blocks, sum_blocks, self._rest(both, sum_blocks))

    def _simple_record(self, head, y_to, y_from, weights, parity) -> SimpleRecord:
        """A round of Alg. 1 (algorithms.teleport.simple_round) as channels and arrays. A
        token that stays put is not copied; an arriving model lands in y and the two swap
        (its momentum alike)."""
        held, model_to, token, model_from = head
        tr, me = self.transport, self.rank
        x, y, v, v_in = self._arrangements[parity]
        fetch, moved = [], token >= 0 and model_from != me
        if held >= 0 and model_to != me:  # line 8, sender side
            fetch += tr.send_channel(x, model_to, KIND_MODEL)
            if v is not None:
                fetch += tr.send_channel(v, model_to, KIND_MOMENTUM)
        if moved:  # line 8, receiver side
            fetch += tr.recv_channel(y, model_from, KIND_MODEL)
            if v is not None:
                fetch += tr.recv_channel(v_in, model_from, KIND_MOMENTUM)
            parity = 1 - parity  # the roles after the swap
            x, y, v, v_in = self._arrangements[parity]
        gossip: list = []  # channels
        recvs: list = []
        inputs: list = []  # arrays
        step_args = None
        step_blocks = sum_blocks = None
        if token >= 0:  # lines 10-11
            inputs, recvs, recv_channels = self._gossip_inputs(y_from, y)
            sends, send_channels = self._y_sends(y, y_to)
            gossip = recvs + sends
            xv, yv, vv, _ = self._views[parity]
            step_args = (xv, vv, yv)
            step_blocks, sum_blocks = self._pipelines(send_channels, recv_channels, [], x.size)
        return SimpleRecord(fetch, moved, step_args, gossip, inputs, weights, recvs,
                            step_blocks, sum_blocks, self._rest(gossip, sum_blocks))

    # -- running -----------------------------------------------------------------------
    def _step(self, t: int, step_args: tuple, blocks: Blocks | None, sends: list) -> None:
        """The local step into y, then its sends started: whole, or a block of columns at
        a time, each block's pieces started as soon as it is computed."""
        x, v, y = step_args
        lr, rule, tr, sp = self.spec.lr_at(t), self.spec.step_rule, self.transport, self.spans
        if blocks is None:
            a = sp.begin(STEP) if sp is not None else 0.0
            local_step(self.problem, self._nodes, x, v, t, lr, rule, out=y)
            if sp is not None:
                sp.end(STEP, a)
            if sends:
                a = sp.begin(SEND) if sp is not None else 0.0
                tr.start(sends)
                if sp is not None:
                    sp.end(SEND, a)
            return
        poke = self._poke
        a = sp.begin(STEP) if sp is not None else 0.0  # (the pipelined step starts its sends)
        for columns, started in zip(*blocks):
            local_step_columns(self.problem, self._nodes, x, v, t, lr, rule, y, columns)
            if started:
                tr.start(started)
                if poke is not None:  # hand them to the network now, not at the next wait
                    poke(started)
        if sp is not None:
            sp.end(STEP, a)

    def _sum(self, weights, inputs, blocks: Blocks | None) -> None:
        """The gossip sum into x: whole, or a block of columns at a time, each as soon as
        the pieces it reads are in (the same numbers: every operation is element-wise)."""
        s, sp = self.state, self.spans
        began = sp.begin(SUM) if sp is not None else 0.0
        if blocks is None:
            weighted_sum(weights, inputs, s.x, s.work)
            if sp is not None:
                sp.end(SUM, began)
            return
        for columns, needed in zip(*blocks):
            if needed:
                b = sp.begin(WAIT) if sp is not None else 0.0  # (inside the pipelined sum)
                self.transport.wait_all(needed)
                if sp is not None:
                    sp.end(WAIT, b)
            weighted_sum(weights, [a[columns] for a in inputs], s.x[columns], s.work)
        if sp is not None:
            sp.end(SUM, began)

    def overlap(self, t: int, record: OverlapRecord) -> None:
        """Round t of Algorithm 3 from its record."""
        (recvs, sends, both, step_args, inputs, weights, swap, step_blocks, sum_blocks,
         rest) = record
        tr, sp = self.transport, self.spans
        if recvs:  # line 12, started before computing so data can arrive meanwhile
            a = sp.begin(POST) if sp is not None else 0.0
            tr.start(recvs)
            if sp is not None:
                sp.end(POST, a)
        if step_args is not None:  # lines 8-9
            self._step(t, step_args, step_blocks, sends)
        if both:
            if inputs and self._prepare is not None:  # round t+1's step here, its x-free part
                a = sp.begin(PREPARE) if sp is not None else 0.0
                work = self._prepare(self._nodes, t + 1)
                if work is not None:
                    tr.meanwhile(both, work)
                if sp is not None:
                    sp.end(PREPARE, a)
            if sum_blocks is None:
                a = sp.begin(WAIT) if sp is not None else 0.0
                tr.wait_all(both)
                if sp is not None:
                    sp.end(WAIT, a)
        if inputs:  # line 13, summed in ascending token order
            s = self.state
            self._sum(weights, inputs, sum_blocks)
            if sum_blocks is not None:
                a = sp.begin(WAIT) if sp is not None else 0.0
                tr.wait_all(rest)
                if sp is not None:
                    sp.end(WAIT, a)
            if swap:
                s.v, s.v_in = s.v_in, s.v

    def simple(self, t: int, record: SimpleRecord) -> None:
        """Round t of Algorithm 1 from its record."""
        (fetch, moved, step_args, gossip, inputs, weights, recvs, step_blocks, sum_blocks,
         rest) = record
        tr, s, sp = self.transport, self.state, self.spans
        if fetch:  # line 8
            a = sp.begin(HANDOVER) if sp is not None else 0.0
            tr.start(fetch)
            if moved and step_args is not None and self._prepare is not None:
                b = sp.begin(PREPARE) if sp is not None else 0.0
                work = self._prepare(self._nodes, t)  # line 10's x-free part, meanwhile
                if work is not None:
                    tr.meanwhile(fetch, work)
                if sp is not None:
                    sp.end(PREPARE, b)
            tr.wait_all(fetch)
            if sp is not None:
                sp.end(HANDOVER, a)
        if moved:
            s.x, s.y = s.y, s.x
            if s.v is not None:
                s.v, s.v_in = s.v_in, s.v
        if step_args is None:
            return
        # line 11's receives first, then line 10 (pipelined: each block's sends started as
        # it is computed), then line 12 (pipelined: each block summed once its pieces are in)
        if recvs:
            a = sp.begin(POST) if sp is not None else 0.0
            tr.start(recvs)
            if sp is not None:
                sp.end(POST, a)
        self._step(t, step_args, step_blocks, gossip[len(recvs):])  # (gossip: recvs + sends)
        if sum_blocks is None:
            a = sp.begin(WAIT) if sp is not None else 0.0
            tr.wait_all(gossip)
            if sp is not None:
                sp.end(WAIT, a)
        self._sum(weights, inputs, sum_blocks)  # line 12
        if sum_blocks is not None and rest:
            a = sp.begin(WAIT) if sp is not None else 0.0
            tr.wait_all(rest)
            if sp is not None:
                sp.end(WAIT, a)
