"""One node per MPI rank: each rank evaluates the plan of every round locally and moves
only the vectors it must (Algorithms 1 and 3). MPI itself lives in the transport; here
are the paper's lines, executed from :mod:`mpi_teleport.plan`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import evaluation, plan
from ..algorithms import local_step, weighted_sum, work_buffer
from ..checkpoint import LAYOUT_TOKENS, load_token, restore_token, save_token, token_arrays
from ..transport import KIND_MODEL, KIND_MOMENTUM, KIND_Y


class TokenState:
    """The token a rank holds: model x, momentum v, and work buffers (allocated once;
    the receive buffers grow to the most inputs a receiver has needed)."""

    def __init__(self, d: int, momentum: bool, dtype=np.float64):
        self.x = np.zeros(d, dtype)
        self.y = np.zeros(d, dtype)
        self.v = np.zeros(d, dtype) if momentum else None
        self.v_in = np.zeros(d, dtype) if momentum else None
        self.inbox: list[np.ndarray] = []
        self.work = work_buffer(d, dtype)  # one block of the weighted sum

    def inboxes(self, count: int) -> list[np.ndarray]:
        while len(self.inbox) < count:
            self.inbox.append(np.zeros_like(self.x))
        return self.inbox



# Rounds planned and compiled at a time: long enough to amortise the block's setup,
# short enough that a run stopped early wastes little.
BLOCK_ROUNDS = 128


def _uses_channels(transport) -> bool:
    """Persistent channels for a plain transport; the latency layer (it has a logical
    clock and stamps every message) keeps the per-round path."""
    return not hasattr(transport, "clock_us") and callable(getattr(transport, "send_channel", None))


class MpiBackend:
    """This rank's node. ``transport`` moves vectors (optionally through the latency
    layer); ``problem`` computes this node's gradients.

    Rounds are planned ahead, a block at a time (:func:`plan.overlap_block`,
    :func:`plan.simple_block`), and compiled into per-round records: the persistent
    channels to start, the input vectors and weights of the gossip sum, the buffer swaps.
    A round then starts requests, steps, waits and sums, with no planning, no allocation
    and no per-peer Python work. Under the latency layer the records are the round's
    plan steps, executed with per-round messages as before.
    """

    name = "mpi"
    layout = LAYOUT_TOKENS
    checks_every_round = False  # signals are agreed on at logging and checkpoint rounds

    def __init__(self, problem, spec, transport, token_device=None):
        self.problem, self.spec, self.transport = problem, spec, transport
        # Tokens as torch tensors on this device (backends/device.py): the problem's
        # choice (a GPU problem's device) unless given; None keeps them in numpy.
        self.token_device = token_device or getattr(problem, "token_device", None)
        self.rank = transport.rank
        self.root = self.rank == 0
        self.state: TokenState | None = None
        self._rosters: dict[int, list] = {}
        # persistent channels move numpy buffers: host tokens on a plain transport
        self._fast = _uses_channels(transport) and self.token_device is None
        self._block = None  # (t0, t1, records) of the rounds compiled ahead
        self._nodes = [self.rank]
        self._views: dict[int, np.ndarray] = {}
        self._records: dict[tuple, tuple] = {}  # compiled rounds by pattern and buffers
        overlap = spec.moves == "overlap"
        self._round = ((self._overlap_fast if overlap else self._simple_fast) if self._fast
                       else (self._overlap if overlap else self._simple))

    # -- rosters, computed once per round ------------------------------------------------
    def roster(self, t: int) -> list:
        hit = self._rosters.get(t)
        if hit is None:
            if len(self._rosters) > 3 * BLOCK_ROUNDS:  # keep the current block's and later
                floor = self._block[0] - 1 if self._block is not None else t - 1
                kept = {r: v for r, v in self._rosters.items() if r >= floor}
                self._rosters = kept if len(kept) <= 2 * BLOCK_ROUNDS + 2 else {}
            hit = self._rosters[t] = self.phase.roster(t)
        return hit

    def _prev_roster(self, t: int) -> list:
        """Where the round-t tokens sit on entry under Alg. 1: holders(t-1), or holders(t)
        at the start of a fresh phase (and of the run)."""
        if t == self.phase.start and (self.phase.fresh or t == 0):
            return self.roster(t)
        return self.roster(t - 1)

    # -- placing tokens ----------------------------------------------------------------
    def begin(self, phase, start: int, x0: np.ndarray, restore=None) -> None:
        """Tokens of round ``start``: Alg. 3 (and DSGD) keep them with holders(start),
        Alg. 1 with holders(start - 1) (holders(start) at a fresh start)."""
        self.phase, self._rosters, self._block = phase, {}, None
        if self.state is None:
            self.state = self._new_state(len(x0), self.spec.momentum > 0, x0.dtype)
        s = self.state
        if s.v is not None:
            s.v[...] = 0
        self.holding = self.roster(start) if self.spec.moves == "overlap" else self._prev_roster(start)
        self.held = plan.role(self.holding, self.rank)
        if restore is None:
            if self.held[1] >= 0:
                s.x[...] = x0
            return
        if self.held[1] >= 0:
            restore_token(s, load_token(*restore, self.held[1]))

    # -- one round -----------------------------------------------------------------------
    def step(self, t: int) -> None:
        block = self._block
        if block is None or not block[0] <= t < block[1]:
            block = self._block = self._compile(t)
        i = t - block[0]
        self._round(t, block[2][i])
        self.holding, self.held = block[3][i]

    def _ahead(self, t: int) -> None:
        """The roster a block ahead (the schedule's cost is then paid while a round's
        messages travel, not when the next block is compiled)."""
        r = t + BLOCK_ROUNDS + 1
        if r <= self.phase.stop and r not in self._rosters:
            self.roster(r)

    def _compile(self, t0: int):
        """Plan rounds t0 .. t1 - 1 (to the end of the phase at most) in one pass and turn
        each into the record its round executes: (t0, t1, records, (holding, held) after
        each round). Rounds with the same pattern (DSGD on a static topology, a token that
        stays put, a two-node run) share one record."""
        t1 = max(t0 + 1, min(t0 + BLOCK_ROUNDS, self.phase.stop))
        top, me, s, overlap = self.spec.topology, self.rank, self.state, self.spec.moves == "overlap"
        nows = [self.roster(t) for t in range(t0, t1 + 1)]
        if overlap:
            block = plan.overlap_block(top, nows, me, t0)
            after = list(zip(nows[1:], zip(block.next_run.tolist(), block.next_token.tolist())))
        else:
            block = plan.simple_block(top, [self._prev_roster(t) for t in range(t0, t1)],
                                      nows[:-1], me, t0)
            after = list(zip(nows[:-1], zip(block.run.tolist(), block.token.tolist())))
        if not self._fast:
            return t0, t1, [block.step(i) for i in range(t1 - t0)], after
        if overlap:
            columns = (block.token, block.momentum_to, block.next_token, block.momentum_from,
                       block.n_to, block.n_from, block.y_to, block.y_from)
            make = self._overlap_record
        else:
            columns = (block.held, block.model_to, block.token, block.model_from,
                       block.n_to, block.n_from, block.y_to, block.y_from)
            make = self._simple_record
        rows = np.column_stack(columns).tolist()
        weights = block.weights.tolist()
        buffers = [s.x, s.y, s.v, s.v_in]  # which array plays which part, round by round
        cache = self._records
        if len(cache) > 4096:
            cache.clear()
        records = []
        for row, w in zip(rows, weights):
            key = (*row, *w, id(buffers[0]), id(buffers[2]))
            hit = cache.get(key)
            if hit is None:
                hit = cache[key] = make(row, w, list(buffers))
            records.append(hit[0])
            buffers = hit[1]
        return t0, t1, records, after

    def _view(self, a: np.ndarray | None):
        """a[None], made once per array (local_step takes rows of a matrix)."""
        if a is None:
            return None
        hit = self._views.get(id(a))
        if hit is None or hit.base is not a:
            hit = self._views[id(a)] = a[None]
        return hit

    def _new_state(self, d: int, momentum: bool, dtype):
        if self.token_device is None:
            return TokenState(d, momentum, dtype)
        from .device import DeviceTokenState

        return DeviceTokenState(d, momentum, dtype, self.token_device)

    def _sum(self, weights, inputs) -> None:  # Alg. 1 line 13 / Alg. 3 line 13
        s = self.state
        if self.token_device is None:
            weighted_sum(weights, inputs, s.x, s.work)
        else:
            from .device import weighted_sum as device_sum

            device_sum(weights, inputs, s)

    def _local_step(self, t: int, x=None, v=None, y=None) -> None:  # Alg. 1 l. 10 / Alg. 3 l. 8
        """y = x - lr g on this rank's token: the rows (x, v, y) the fast path compiled,
        or the state's current arrays."""
        s = self.state
        if self.token_device is not None:
            from .device import local_step as device_step

            device_step(self.problem, self.rank, s, t, self.spec.lr_at(t), self.spec.momentum)
            return
        if x is None:
            x, v, y = s.x[None], None if s.v is None else s.v[None], s.y[None]
        local_step(self.problem, self._nodes, x, v, t, self.spec.lr_at(t), self.spec.momentum,
                   out=y)

    # -- Algorithm 3 ---------------------------------------------------------------------
    def _gossip_inputs(self, y_from, y) -> tuple[list, list]:
        """The inputs of a gossip sum in source order (this rank's own y where it is a
        source, else a receive buffer) and the receive channels that fill them."""
        inbox, me = self.state.inboxes(len(y_from)), self.rank
        inputs, recvs = [], []
        for i, src in enumerate(y_from):
            if src == me:
                inputs.append(y)
            else:
                inputs.append(inbox[i])
                recvs.append(self.transport.recv_channel(inbox[i], src, KIND_Y))
        return inputs, recvs

    def _overlap_record(self, row, w, buffers):
        """Round of Alg. 3 as channels and arrays -> (record, buffers after the round). A
        rank that is its own successor on an edge keeps what it would send itself: its y
        is the input (no copy), its momentum stays."""
        token, momentum_to, next_token, momentum_from, n_to, n_from = row[:6]
        width = (len(row) - 6) // 2
        y_to, y_from = row[6:6 + n_to], row[6 + width:6 + width + n_from]
        tr, me = self.transport, self.rank
        x, y, v, v_in = buffers
        recvs, sends, inputs, swap = [], [], [], False
        if next_token >= 0:
            inputs, recvs = self._gossip_inputs(y_from, y)
            if v is not None and momentum_from != me:
                recvs.append(tr.recv_channel(v_in, momentum_from, KIND_MOMENTUM))
                swap = True
        if token >= 0:
            sends = [tr.send_channel(y, dest, KIND_Y) for dest in y_to if dest != me]
            if v is not None and momentum_to != me:
                sends.append(tr.send_channel(v, momentum_to, KIND_MOMENTUM))
        weights = np.array(w[:n_from], dtype=x.dtype)
        step_args = (self._view(x), self._view(v), self._view(y)) if token >= 0 else None
        record = (recvs, sends, recvs + sends, step_args, inputs, weights, swap)
        return record, [x, y, v_in, v] if swap else buffers

    def _overlap_fast(self, t: int, record) -> None:
        recvs, sends, both, step_args, inputs, weights, swap = record
        tr, s = self.transport, self.state
        if recvs:  # line 12, posted before computing so data can arrive meanwhile
            tr.start(recvs)
        if step_args is not None:  # lines 8-9
            self._local_step(t, *step_args)
            if sends:
                tr.start(sends)
        self._ahead(t)  # while the messages travel
        if both:
            tr.wait_all(both)
        if inputs:  # line 13, summed in ascending token order
            weighted_sum(weights, inputs, s.x, s.work)
            if swap:
                s.v, s.v_in = s.v_in, s.v

    def _overlap(self, t: int, p) -> None:
        """Algorithm 3 with per-round messages (the latency layer stamps each one)."""
        tr, me, s = self.transport, self.rank, self.state
        tag_y, tag_v = tr.tag(t, KIND_Y), tr.tag(t, KIND_MOMENTUM)
        pending, inputs = None, None
        if p.next_token >= 0:
            inbox = s.inboxes(len(p.y_from))
            inputs = [s.y if src == me else inbox[i] for i, src in enumerate(p.y_from)]
            recvs = [(src, tag_y, inbox[i]) for i, src in enumerate(p.y_from) if src != me]
            if s.v is not None and p.momentum_from != me:
                recvs.append((p.momentum_from, tag_v, s.v_in))
            pending = tr.post_recvs(recvs)
        if p.token >= 0:
            self._local_step(t)
            sends = [(dest, tag_y, s.y) for dest in p.y_to if dest != me]
            if s.v is not None and p.momentum_to != me:
                sends.append((p.momentum_to, tag_v, s.v))
            pending = tr.post_sends(sends, pending)
        if pending is not None:
            tr.wait(pending)
        if p.next_token >= 0:  # line 13, summed in ascending token order
            self._sum(p.weights, inputs)
            if s.v is not None and p.momentum_from != me:
                s.v, s.v_in = s.v_in, s.v

    # -- Algorithm 1 ---------------------------------------------------------------------
    def _simple_record(self, row, w, buffers):
        """Round of Alg. 1 as channels and arrays -> (record, buffers after the round). A
        token that stays put is not copied; an arriving model lands in y and the two swap
        (its momentum alike)."""
        held, model_to, token, model_from, n_to, n_from = row[:6]
        width = (len(row) - 6) // 2
        y_to, y_from = row[6:6 + n_to], row[6 + width:6 + width + n_from]
        tr, me, s = self.transport, self.rank, self.state
        x, y, v, v_in = buffers
        fetch, moved = [], token >= 0 and model_from != me
        if held >= 0 and model_to != me:  # line 8
            fetch.append(tr.send_channel(x, model_to, KIND_MODEL))
            if v is not None:
                fetch.append(tr.send_channel(v, model_to, KIND_MOMENTUM))
        if moved:
            fetch.append(tr.recv_channel(y, model_from, KIND_MODEL))
            if v is not None:
                fetch.append(tr.recv_channel(v_in, model_from, KIND_MOMENTUM))
            x, y, v, v_in = y, x, v_in, v
        gossip, inputs, step_args = [], [], None
        if token >= 0:
            inputs, gossip = self._gossip_inputs(y_from, y)
            gossip += [tr.send_channel(y, dest, KIND_Y) for dest in y_to if dest != me]
            step_args = (self._view(x), self._view(v), self._view(y))
        weights = np.array(w[:n_from], dtype=s.x.dtype)
        return (fetch, moved, step_args, gossip, inputs, weights), [x, y, v, v_in]

    def _simple_fast(self, t: int, record) -> None:
        fetch, moved, step_args, gossip, inputs, weights = record
        tr, s = self.transport, self.state
        if fetch:
            tr.start(fetch)
            tr.wait_all(fetch)
        if moved:
            s.x, s.y = s.y, s.x
            if s.v is not None:
                s.v, s.v_in = s.v_in, s.v
        if step_args is not None:
            self._local_step(t, *step_args)  # line 10
            if gossip:
                tr.start(gossip)
                self._ahead(t)  # while the messages travel
                tr.wait_all(gossip)
            weighted_sum(weights, inputs, s.x, s.work)  # line 13

    def _simple(self, t: int, p) -> None:
        """Algorithm 1 with per-round messages (the latency layer stamps each one): fetch
        the token from its previous holder (line 8), take an SGD step (line 10), then
        gossip among the round-t holders (lines 11-13)."""
        tr, s = self.transport, self.state
        tag_x, tag_v = tr.tag(t, KIND_MODEL), tr.tag(t, KIND_MOMENTUM)
        sends, recvs = [], []
        if p.held >= 0:  # line 8: x_m moves to holders(t)[m] (a local copy if the same)
            sends.append((p.model_to, tag_x, s.x))
            if s.v is not None:
                sends.append((p.model_to, tag_v, s.v))
        if p.token >= 0:
            recvs.append((p.model_from, tag_x, s.y))
            if s.v is not None:
                recvs.append((p.model_from, tag_v, s.v_in))
        tr.exchange(sends, recvs)
        if p.token >= 0:
            s.x, s.y = s.y, s.x
            if s.v is not None:
                s.v, s.v_in = s.v_in, s.v
            self._local_step(t)
            inbox = s.inboxes(len(p.y_from))
            tag_y = tr.tag(t, KIND_Y)
            recvs = [(src, tag_y, inbox[i]) for i, src in enumerate(p.y_from)]
            sends = [(dest, tag_y, s.y) for dest in p.y_to]
            tr.exchange(sends, recvs)
            self._sum(p.weights, inbox[:len(p.y_from)])  # line 13

    # -- what the engine reads (collectives) ------------------------------------------------
    def tokens(self, run: int) -> np.ndarray | None:
        """Run ``run``'s token matrix on rank 0 (rows in token order), None elsewhere."""
        s = self.state
        mine = s.x if self.held[0] == run and self.held[1] >= 0 else None
        return self.transport.gather_rows(mine, self.holding[run], len(s.x), s.x.dtype)

    def evaluate(self, problem, x: np.ndarray | None, split: str = "test"):
        """Collective: ``problem.evaluate(x)`` ("test") or ``problem.validate(x)``
        ("validation") of the root's token matrix x, on the root (None elsewhere).

        A problem with chunked evaluation (:mod:`mpi_teleport.evaluation`) is evaluated
        by every rank: the averaged model is broadcast, each rank evaluates its
        chunk-aligned slice, the chunk rows come back to the root in rank order; the
        numbers are those of one process evaluating everything, bit for bit."""
        if not evaluation.is_shared(problem, split):
            if not self.root:
                return None
            return problem.evaluate(x) if split == "test" else problem.validate(x)
        tr = self.transport
        vector = problem.average(x) if self.root else np.empty(problem.dim, problem.dtype)
        tr.bcast_array(vector)
        lo, hi = evaluation.part(problem, split, self.rank, tr.size)
        rows = tr.gather_rows_in_order(problem.evaluation_sums(vector, lo, hi, split))
        return evaluation.result(problem, rows, x, split) if self.root else None

    def virtual_time_s(self, r: int) -> float | None:
        top = getattr(self.transport, "virtual_time_s", None)
        return None if top is None else top()

    def clocks(self, r: int) -> list[float] | None:
        clock = getattr(self.transport, "clock_us", None)
        if clock is None:
            return None
        return self.transport.gather(float(clock))

    def restore_clock(self, clocks) -> None:
        if clocks and hasattr(self.transport, "clock_us") and len(clocks) > self.rank:
            self.transport.clock_us = float(clocks[self.rank])

    def share(self, fn):
        """fn() on rank 0, its result (or the NonFiniteError it raised) on every rank."""
        from ..errors import NonFiniteError

        verdict = (None, None)
        if self.root:
            try:
                verdict = (fn(), None)
            except NonFiniteError as exc:
                verdict = (None, str(exc))
        value, error = self.transport.bcast(verdict)
        if error:
            raise NonFiniteError(error)
        return value

    def agree(self, flag: int) -> int:
        return self.transport.agree_max(flag)

    def barrier(self) -> None:
        self.transport.barrier()

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self, directory: Path) -> list[str]:
        """This rank's token file (layout 'tokens'), if it holds one; collective-free."""
        arrays = token_arrays(self.state)
        if self.held[1] >= 0:
            save_token(directory, self.held[1], arrays)
        return sorted(arrays)

    @property
    def dim(self) -> int:
        return len(self.state.x)

    def close(self) -> None:
        """Free the persistent channels (they hold this backend's buffers) and close the
        latency layer."""
        s = self.state
        if self._fast and s is not None:
            self.transport.release_channels([s.x, s.y, s.v, s.v_in, *s.inbox])
        close = getattr(type(self.transport), "close", None)  # the latency layer's
        if close is not None:
            close(self.transport)
