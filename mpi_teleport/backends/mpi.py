"""One node per MPI rank: each rank evaluates the plan of every round locally and moves
only the vectors it must (Algorithms 1 and 3). MPI itself lives in the transport; here
are the paper's lines, executed from :mod:`mpi_teleport.plan`.
"""
from __future__ import annotations

from dataclasses import dataclass
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



# Rounds planned and compiled at a time: long enough that the block's numpy calls cost
# well under a microsecond per round, short enough that a run stopped early wastes little
# (about a millisecond of planning).
BLOCK_ROUNDS = 1024
# Compiled round records kept (by pattern); a run with more distinct patterns rebuilds
# records (cheap: table lookups), it never grows without bound.
RECORDS_KEPT = 1 << 14


def _uses_channels(transport) -> bool:
    """Persistent channels for a plain transport; the latency layer (it has a logical
    clock and stamps every message) keeps the per-round path."""
    return not hasattr(transport, "clock_us") and callable(getattr(transport, "send_channel", None))


@dataclass
class _Block:
    """Rounds t0 .. t1 - 1 planned and compiled: each round's record, and where the tokens
    are after each round (row i of ``after``: every run's holders side by side; this
    node's (run, token) in ``after_run``/``after_token``)."""

    t0: int
    t1: int
    records: list
    after: np.ndarray
    after_run: np.ndarray
    after_token: np.ndarray


class MpiBackend:
    """This rank's node. ``transport`` moves vectors (optionally through the latency
    layer); ``problem`` computes this node's gradients.

    Rounds are planned ahead, a block at a time (:func:`plan.overlap_block_flat`,
    :func:`plan.simple_block_flat`, on the rosters of the whole block from
    :meth:`Phase.rosters`), and compiled into per-round records: the persistent channels
    to start, the input vectors and weights of the gossip sum, the buffer swaps. Rounds
    with the same pattern share one record, found by the bytes of their plan row. A round
    then starts requests, steps, waits and sums, with no planning, no allocation and no
    per-peer Python work. Under the latency layer the records are the round's plan steps,
    executed with per-round messages as before.
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
        # persistent channels move numpy buffers: host tokens on a plain transport
        self._fast = _uses_channels(transport) and self.token_device is None
        self._block: _Block | None = None
        self._last = -1  # index in the block of the last round run (-1: none yet)
        self._nodes = [self.rank]
        self._views: dict[int, np.ndarray] = {}
        self._records: dict[bytes, tuple] = {}  # compiled rounds by plan row and buffers
        self._parities: dict[int, list] = {}  # the buffers' roles at each swap parity (0, 1)
        self._overlap = spec.moves == "overlap"
        self._round = ((self._overlap_fast if self._overlap else self._simple_fast) if self._fast
                       else (self._overlap_step if self._overlap else self._simple_step))

    # -- where the tokens are --------------------------------------------------------------
    @property
    def held(self) -> tuple[int, int]:
        """(run, token) this rank holds now (after the last round run), or (-1, -1)."""
        b, i = self._block, self._last
        if b is None or i < 0:
            return self._held
        return int(b.after_run[i]), int(b.after_token[i])

    @property
    def holding(self) -> list[np.ndarray]:
        """Every run's holders of the tokens as they sit now."""
        b, i = self._block, self._last
        if b is None or i < 0:
            return self._holding
        return self._split(b.after[i])

    def _split(self, row: np.ndarray) -> list[np.ndarray]:
        cuts = np.cumsum(self._sizes)[:-1]
        return np.split(row, cuts) if len(cuts) else [row]

    def _settle(self) -> None:
        """Keep where the tokens are before the block they were read from is replaced."""
        self._held, self._holding = self.held, self.holding
        self._block, self._last = None, -1

    # -- placing tokens ----------------------------------------------------------------
    def begin(self, phase, start: int, x0: np.ndarray, restore=None) -> None:
        """Tokens of round ``start``: Alg. 3 (and DSGD) keep them with holders(start),
        Alg. 1 with holders(start - 1) (holders(start) at a fresh start)."""
        self.phase, self._block, self._last = phase, None, -1
        if self.state is None:
            self.state = self._new_state(len(x0), self.spec.momentum > 0, x0.dtype)
            s = self.state
            self._canonical = (s.x, s.y, s.v, s.v_in)  # the buffers' roles at parity 0
        s = self.state
        if s.v is not None:
            s.v[...] = 0
        first = self._entry_rosters(start, start + 1)[0]
        self._sizes = tuple(len(h) for h in phase.roster(start))
        self._holding = self._split(first)
        self._held = plan.role(self._holding, self.rank)
        if restore is None:
            if self._held[1] >= 0:
                s.x[...] = x0
            return
        if self._held[1] >= 0:
            restore_token(s, load_token(*restore, self._held[1]))

    def _entry_rosters(self, t0: int, t1: int) -> np.ndarray:
        """Where the tokens of rounds t0 .. t1 - 1 sit on entry, one row per round: the
        round's own roster under Alg. 3; under Alg. 1 the previous round's, or the round's
        own at the start of a fresh phase (and of the run)."""
        phase = self.phase
        if self._overlap:
            return phase.rosters(t0, t1)
        if t0 == phase.start and (phase.fresh or t0 == 0):
            rows = phase.rosters(t0, t1)
            return np.concatenate([rows[:1], rows[:-1]])
        return phase.rosters(t0 - 1, t1 - 1)

    # -- one round -----------------------------------------------------------------------
    def step(self, t: int) -> None:
        block = self._block
        if block is None or not block.t0 <= t < block.t1:
            block = self._compile(t)
        i = t - block.t0
        self._round(t, block.records[i])
        self._last = i

    def _compile(self, t0: int) -> _Block:
        """Plan rounds t0 .. t1 - 1 (to the end of the phase at most) in one pass and turn
        each into the record its round executes."""
        self._settle()
        phase, top, me = self.phase, self.spec.topology, self.rank
        t1 = max(t0 + 1, min(t0 + BLOCK_ROUNDS, phase.stop))
        if self._overlap:
            flat = phase.rosters(t0, t1 + 1)
            block = plan.overlap_block_flat(top, flat, self._sizes, me, t0)
            after, after_run, after_token = flat[1:], block.next_run, block.next_token
        else:
            nows = phase.rosters(t0, t1)
            block = plan.simple_block_flat(top, self._entry_rosters(t0, t1), nows, self._sizes,
                                           me, t0)
            after, after_run, after_token = nows, block.run, block.token
        if self._fast:
            records = self._compiled(block)
        else:
            records = [block.step(i) for i in range(t1 - t0)]
        self._block = _Block(t0, t1, records, after, after_run, after_token)
        return self._block

    def _compiled(self, block) -> list:
        """One record per round of ``block``, shared by rounds with the same plan row and
        the same buffers in the same roles (the parity of the buffer swaps so far)."""
        me, s, momentum = self.rank, self.state, self.state.v is not None
        if self._overlap:
            columns = [block.token, block.momentum_to, block.next_token, block.momentum_from,
                       block.n_to, block.n_from]
            # the momentum arrives in v_in and the two swap (Alg. 3's momentum hop)
            swaps = (block.next_token >= 0) & (block.momentum_from != me) if momentum else None
            start = int(momentum and s.v is not self._canonical[2])
            make = self._overlap_record
        else:
            columns = [block.held, block.model_to, block.token, block.model_from,
                       block.n_to, block.n_from]
            swaps = (block.token >= 0) & (block.model_from != me)  # a model that arrives
            start = int(s.x is not self._canonical[0])
            make = self._simple_record
        if swaps is None:
            parity = np.full(len(block), start, dtype=np.int64)
        else:
            parity = (start + np.cumsum(swaps) - swaps) % 2
        weights = np.ascontiguousarray(block.weights)
        rows = np.column_stack(columns + [block.y_to, block.y_from, weights.view(np.int64),
                                          parity])
        keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel().tolist()
        cache = self._records
        if len(cache) > RECORDS_KEPT:
            cache.clear()
        get = cache.get
        records = [get(key) for key in keys]
        if None in records:  # new patterns: build each once (rounds of this block share too)
            width = block.y_to.shape[1]
            token_weights = weights.astype(s.x.dtype)  # rounded to the token's dtype once
            for i, record in enumerate(records):
                if record is None:
                    key = keys[i]
                    record = get(key)
                    if record is None:
                        row = rows[i].tolist()
                        y_to = row[6:6 + row[4]]
                        y_from = row[6 + width:6 + width + row[5]]
                        record = cache[key] = make(row[:4], y_to, y_from,
                                                   token_weights[i, :row[5]], row[-1])
                    records[i] = record
        return records

    def _buffers(self, parity: int) -> list:
        """[x, y, v, v_in] at a parity of swaps (Alg. 3 swaps v and v_in: the momentum hop;
        Alg. 1 swaps x with y and v with v_in: an arriving model); a fresh list."""
        hit = self._parities.get(parity)
        if hit is None:
            x, y, v, v_in = self._canonical
            if not parity:
                buffers = [x, y, v, v_in]
            else:
                buffers = [x, y, v_in, v] if self._overlap else [y, x, v_in, v]
            hit = self._parities[parity] = buffers
        return list(hit)

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

    def _local_step(self, t: int) -> None:  # Alg. 1 l. 10 / Alg. 3 l. 8
        """y = x - lr g on this rank's token, from the state's current arrays (the
        per-round path; the fast path steps on the rows its record holds)."""
        s = self.state
        if self.token_device is not None:
            from .device import local_step as device_step

            device_step(self.problem, self.rank, s, t, self.spec.lr_at(t), self.spec.momentum)
            return
        local_step(self.problem, self._nodes, s.x[None], None if s.v is None else s.v[None], t,
                   self.spec.lr_at(t), self.spec.momentum, out=s.y[None])

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

    def _overlap_record(self, head, y_to, y_from, weights, parity) -> tuple:
        """Round of Alg. 3 as channels and arrays. A rank that is its own successor on an
        edge keeps what it would send itself: its y is the input (no copy), its momentum
        stays."""
        token, momentum_to, next_token, momentum_from = head
        tr, me = self.transport, self.rank
        x, y, v, v_in = self._buffers(parity)
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
        step_args = (self._view(x), self._view(v), self._view(y)) if token >= 0 else None
        return recvs, sends, recvs + sends, step_args, inputs, weights, swap

    def _overlap_fast(self, t: int, record) -> None:
        recvs, sends, both, step_args, inputs, weights, swap = record
        tr = self.transport
        if recvs:  # line 12, posted before computing so data can arrive meanwhile
            tr.start(recvs)
        if step_args is not None:  # lines 8-9
            x, v, y = step_args
            local_step(self.problem, self._nodes, x, v, t, self.spec.lr_at(t),
                       self.spec.momentum, out=y)
            if sends:
                tr.start(sends)
        if both:
            tr.wait_all(both)
        if inputs:  # line 13, summed in ascending token order
            s = self.state
            weighted_sum(weights, inputs, s.x, s.work)
            if swap:
                s.v, s.v_in = s.v_in, s.v

    def _overlap_step(self, t: int, p) -> None:
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
    def _simple_record(self, head, y_to, y_from, weights, parity) -> tuple:
        """Round of Alg. 1 as channels and arrays. A token that stays put is not copied; an
        arriving model lands in y and the two swap (its momentum alike)."""
        held, model_to, token, model_from = head
        tr, me = self.transport, self.rank
        x, y, v, v_in = self._buffers(parity)
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
        return fetch, moved, step_args, gossip, inputs, weights

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
            x, v, y = step_args  # line 10
            local_step(self.problem, self._nodes, x, v, t, self.spec.lr_at(t),
                       self.spec.momentum, out=y)
            if gossip:
                tr.start(gossip)
                tr.wait_all(gossip)
            weighted_sum(weights, inputs, s.x, s.work)  # line 13

    def _simple_step(self, t: int, p) -> None:
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
        """fn() on rank 0, its result (or the NonFiniteError or UsageError it raised: a
        non-finite metric, an ``evaluate`` that breaks the Problem contract) on every rank."""
        from ..collective import agreed
        from ..errors import NonFiniteError, UsageError

        verdict = (None, None)
        if self.root:
            try:
                verdict = (fn(), None)
            except (NonFiniteError, UsageError) as exc:
                verdict = (None, (isinstance(exc, UsageError), str(exc)))
        value, error = self.transport.bcast(verdict)
        if error:
            usage, message = error
            raise agreed((UsageError if usage else NonFiniteError)(message))
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
