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



class MpiBackend:
    """This rank's node. ``transport`` moves vectors (optionally through the latency
    layer); ``problem`` computes this node's gradients."""

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
        self._next = None  # the plan of the coming round, computed while messages travel

    # -- rosters, planned once per round -----------------------------------------------
    def roster(self, t: int) -> list:
        hit = self._rosters.get(t)
        if hit is None:
            if len(self._rosters) > 8:
                self._rosters.clear()
            hit = self._rosters[t] = self.phase.roster(t)
        return hit

    def _plan(self, t: int):
        nxt = self._next
        if nxt is not None and nxt.t == t:
            return nxt
        return self._make_plan(t)

    def _make_plan(self, t: int):
        top = self.spec.topology
        if self.spec.moves == "overlap":
            return plan.overlap_step(top, self.roster(t), self.roster(t + 1), self.rank, t)
        return plan.simple_step(top, self._prev_roster(t), self.roster(t), self.rank, t)

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
        self.phase, self._rosters, self._next = phase, {}, None
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
        if self.spec.moves == "overlap":
            self._overlap(t)
        else:
            self._simple(t)

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

    def _local_step(self, t: int) -> None:  # Alg. 1 line 10 / Alg. 3 line 8
        s = self.state
        if self.token_device is not None:
            from .device import local_step as device_step

            device_step(self.problem, self.rank, s, t, self.spec.lr_at(t), self.spec.momentum)
            return
        local_step(self.problem, [self.rank], s.x[None], None if s.v is None else s.v[None], t,
                   self.spec.lr_at(t), self.spec.momentum, out=s.y[None])

    def _overlap(self, t: int) -> None:
        """Algorithm 3, one communication phase. A rank that is its own successor on an
        edge keeps what it would send itself: its y is the input (no copy), its momentum
        stays."""
        tr, me, s, p = self.transport, self.rank, self.state, self._plan(t)
        tag_y, tag_v = tr.tag(t, KIND_Y), tr.tag(t, KIND_MOMENTUM)
        pending, inputs = None, None
        if p.next_token >= 0:  # line 12, posted before computing so data can arrive meanwhile
            inbox = s.inboxes(len(p.y_from))
            inputs = [s.y if src == me else inbox[i] for i, src in enumerate(p.y_from)]
            recvs = [(src, tag_y, inbox[i]) for i, src in enumerate(p.y_from) if src != me]
            if s.v is not None and p.momentum_from != me:
                recvs.append((p.momentum_from, tag_v, s.v_in))
            pending = tr.post_recvs(recvs)
        if p.token >= 0:  # lines 8-9
            self._local_step(t)
            sends = [(dest, tag_y, s.y) for dest in p.y_to if dest != me]
            if s.v is not None and p.momentum_to != me:
                sends.append((p.momentum_to, tag_v, s.v))
            pending = tr.post_sends(sends, pending)
        self._next = self._make_plan(t + 1)  # next round's line 5, while the messages travel
        if pending is not None:
            tr.wait(pending)
        if p.next_token >= 0:  # line 13, summed in ascending token order
            self._sum(p.weights, inputs)
            if s.v is not None and p.momentum_from != me:
                s.v, s.v_in = s.v_in, s.v
        self.holding, self.held = self.roster(t + 1), (p.next_run, p.next_token)

    def _simple(self, t: int) -> None:
        """Algorithm 1: fetch the token from its previous holder (line 8), take an SGD
        step (line 10), then gossip among the round-t holders (lines 11-13)."""
        tr, s, p = self.transport, self.state, self._plan(t)
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
            self._local_step(t)  # line 10
            inbox = s.inboxes(len(p.y_from))
            tag_y = tr.tag(t, KIND_Y)
            recvs = [(src, tag_y, inbox[i]) for i, src in enumerate(p.y_from)]
            sends = [(dest, tag_y, s.y) for dest in p.y_to]
            tr.exchange(sends, recvs)
            self._sum(p.weights, inbox[:len(p.y_from)])  # line 13
        self.holding, self.held = self.roster(t), (p.run, p.token)

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
        close = getattr(type(self.transport), "close", None)  # the latency layer's
        if close is not None:
            close(self.transport)
