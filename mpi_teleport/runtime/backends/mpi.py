"""One node per MPI rank: each rank evaluates the plan of every round locally and moves
only the vectors it must (Algorithms 1 and 3). MPI itself lives in the transport.

A round is executed by one of two executors of the same round: the round executor
(:mod:`mpi_teleport.core.algorithms.teleport`, the paper's pseudo-code, per-round messages)
under the latency layer and with device tokens, or its compiled equivalent
(:mod:`mpi_teleport.runtime.backends.compiled`, persistent channels) on a plain transport.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from .. import collective
from ...core import evaluation, plan
from ...core.algorithms import local_step, teleport, weighted_sum
from ...checkpoint import LAYOUT_TOKENS, load_token, restore_token, save_token, token_arrays
from ...errors import UsageError
from ...core.interfaces import ChannelTransport, ClockedTransport, TokenTransport
from ...core.training import round_means
from .compiled import CompiledRounds
from ...trace.spans import PLAN, ROUND
from .tokens import new_state

if TYPE_CHECKING:
    from ...trace.spans import Spans
    from .device import DeviceTokenState
    from .tokens import TokenState

# Rounds planned (and compiled) at a time: long enough that the block's numpy calls cost
# well under a microsecond per round, short enough that a run stopped early wastes little
# (about a millisecond of planning).
BLOCK_ROUNDS = 1024


@dataclass
class _Block:
    """Rounds t0 .. t1 - 1 planned: each round's record (a plan step, or a compiled
    record), and where the tokens are after each round (row i of ``after``: every run's
    holders side by side; this node's (run, token) in ``after_run``/``after_token``)."""

    t0: int
    t1: int
    records: list
    after: np.ndarray
    after_run: np.ndarray
    after_token: np.ndarray


class MpiBackend:
    """This rank's node (an :class:`~mpi_teleport.core.interfaces.Backend`). ``transport``
    moves vectors (a :class:`~mpi_teleport.core.interfaces.TokenTransport`, optionally the
    latency layer); ``problem`` computes this node's gradients.

    Rounds are planned ahead, a block at a time (:func:`plan.overlap_block_flat`,
    :func:`plan.simple_block_flat`, on the rosters of the whole block from
    :meth:`Phase.rosters <mpi_teleport.core.schedule.Phase.rosters>`). A round is then run by
    the round executor from its plan step, or, when the transport has persistent channels
    (``has_channels``) and the tokens are host arrays, from the record
    :class:`~mpi_teleport.runtime.backends.compiled.CompiledRounds` made of it. ``compiled=False``
    keeps the round executor on any transport (tests compare the two).
    """

    name = "mpi"
    layout = LAYOUT_TOKENS
    checks_every_round = False  # signals are agreed on at logging and checkpoint rounds
    elastic = False  # ElasticBackend (mpi_teleport/elastic/backend.py) survives lost ranks
    losses: Sequence = ()  # (ElasticBackend: the living set's lists)
    replacements: Sequence = ()
    spares = 0
    agree_every = 1
    rollback_to: int | None = None
    # Made with the token buffers by the first begin() (_start_state), before any round
    # runs or anything reads them:
    state: TokenState | DeviceTokenState
    _round: Callable[[int, Any], None]  # (t, record) -> None

    def __init__(self, problem, spec, transport: TokenTransport, token_device=None,
                 compiled: bool | None = None):
        self.problem, self.spec, self.transport = problem, spec, transport
        # Tokens as torch tensors on this device (backends/device.py): the problem's
        # choice (a GPU problem's device) unless given; None keeps them in numpy.
        self.token_device = token_device or getattr(problem, "token_device", None)
        if spec.optimizer is not None:  # (Adam's step is the host one: tokens stay in numpy)
            self.token_device = None
        self.rank = transport.rank
        self.root = self.rank == 0
        self.state = None  # type: ignore[assignment]  # (None until the first begin(): see above)
        # persistent channels move numpy buffers: host tokens on a transport that has them
        # (the latency layer has not: it stamps every message with its clock)
        possible = transport.has_channels and self.token_device is None
        if compiled and not possible:
            raise ValueError("the compiled rounds need a transport with persistent channels "
                             "and host tokens")
        self.compiled = possible if compiled is None else compiled
        self._overlap = spec.moves == "overlap"
        self._compiler: CompiledRounds | None = None
        self._round = None  # type: ignore[assignment]  # (set with the state: see above)
        self._block: _Block | None = None
        self._last = -1  # index in the block of the last round run (-1: none yet)
        self._nodes = [self.rank]
        # shared host links in the latency model (hosts:): the loads of every round's
        # phases, as the simulator's oracle computes them, handed to the layer per round
        self._hosts = bool(transport.has_clock
                           and cast(ClockedTransport, transport).shares_host_links)
        # a trace (mpi_teleport.trace): the span buffer, None when off (the round pays one
        # test); the wrappers that record the executors' parts
        self._spans: Spans | None = None
        self._traced: list = []

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
    def begin(self, phase, start: int, x0: np.ndarray,
              restore: tuple[Path, dict] | None = None) -> None:
        """Tokens of round ``start``: Alg. 3 (and DSGD) keep them with holders(start),
        Alg. 1 with holders(start - 1) (holders(start) at a placement round)."""
        self.phase, self._block, self._last = phase, None, -1
        if self.state is None:
            self._start_state(len(x0), x0.dtype)
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

    def _start_state(self, d: int, dtype) -> None:
        """The token buffers (once per run) and the executor that works on them."""
        s = self.state = new_state(d, self.spec.state_slots, dtype, self.token_device)
        if self.compiled:
            # (compiled: a transport with channels, see __init__)
            self._compiler = CompiledRounds(self.problem, self.spec,
                                            cast(ChannelTransport, self.transport), self.rank,
                                            s, self._overlap)
            if self._spans is not None:
                self._traced.append(self._compiler)
            self._round = self._compiler.overlap if self._overlap else self._compiler.simple
        else:
            node = teleport.Node(self.rank, self.transport, s, self._local_step, self._sum,
                                 self._prepare)
            if self._spans is not None:  # (a trace: the round executor's calls as spans)
                from ...trace.hooks import TracedTransport, traced_call
                from ...trace.spans import STEP, SUM

                tr = TracedTransport(self.transport)
                self._traced.append(tr)
                node = teleport.Node(self.rank, tr, s, traced_call(self._local_step, STEP, tr),
                                     traced_call(self._sum, SUM, tr), self._prepare)
            run = teleport.overlap_round if self._overlap else teleport.simple_round
            self._round = lambda t, step: run(node, step, t)

    def _entry_rosters(self, t0: int, t1: int) -> np.ndarray:
        """Where the tokens of rounds t0 .. t1 - 1 sit on entry, one row per round: the
        round's own roster under Alg. 3, :func:`plan.entry_rosters` under Alg. 1."""
        if self._overlap:
            return self.phase.rosters(t0, t1)
        return plan.entry_rosters(self.phase, t0, t1)

    # -- one round -----------------------------------------------------------------------
    def step(self, t: int) -> None:
        if self._spans is not None:
            return self._traced_step(t)
        block = self._block
        if block is None or not block.t0 <= t < block.t1:
            block = self._plan_block(t)
        i = t - block.t0
        if self._hosts:
            self._set_links(t)
        self._round(t, block.records[i])
        self._last = i

    def _traced_step(self, t: int) -> None:
        """:meth:`step` with its parts recorded as spans (when round t is sampled)."""
        block, i = self._block, self._last  # (the token held on entry: ``held``, inlined)
        token = int(block.after_token[i]) if block is not None and i >= 0 else self._held[1]
        s = cast("Spans", self._spans).at(t, token)  # (step: a trace is on)
        for wrapper in self._traced:  # (None: this round is not recorded)
            wrapper.spans = s
        a = s.begin(ROUND) if s is not None else 0.0
        parts = s.n if s is not None else 0
        if block is None or not block.t0 <= t < block.t1:
            b = s.begin(PLAN) if s is not None else 0.0
            block = self._plan_block(t)
            if s is not None:
                s.end(PLAN, b)
        i = t - block.t0
        if self._hosts:
            self._set_links(t)
        self._round(t, block.records[i])
        self._last = i
        if s is not None:  # (a rank idle in the round records nothing of it: of a
            if s.n > parts:  # thousand ranks, most are, every round)
                s.end(ROUND, a)
            else:
                s.cancel(ROUND)

    def trace(self, tracer) -> None:
        """Record this rank's rounds in ``tracer`` (before the first :meth:`begin`): the
        executors' parts, the problem's gradients inside the steps."""
        from ...trace.hooks import TracedProblem

        tracer.rank = self.rank
        tracer.spans.node = self.rank
        self._spans = tracer.spans
        # a pipelined large token's step and sum record a gradient and a wait per block
        block = getattr(self.transport, "pipeline_bytes", 0)
        nbytes = self.problem.dim * np.dtype(self.problem.dtype).itemsize
        blocks = -(-nbytes // block) if block else 1
        from ...trace.spans import SPANS_PER_ROUND

        tracer.spans.reserve(SPANS_PER_ROUND + 2 * blocks)
        if not isinstance(self.problem, TracedProblem):
            self.problem = TracedProblem(self.problem)
            self._traced.append(self.problem)

    def _set_links(self, t: int) -> None:
        """The host links' loads of round t's phases, for the latency layer."""
        spec = self.spec
        nbytes = self.problem.dim * np.dtype(self.problem.dtype).itemsize
        cast(ClockedTransport, self.transport).plan_round(self.phase, t, spec.topology,
                                                          spec.moves, spec.state_slots > 0, nbytes)

    def _plan_block(self, t0: int) -> _Block:
        """Plan rounds t0 .. t1 - 1 (to the end of the phase at most) in one pass, each
        round as the record its executor runs.

        The plan is a pure function of what every rank shares (the schedule, the topology,
        the step sizes), computed by every rank at the same round before any message of
        the block is posted, with every message of the rounds before it received: a
        refusal found here (a topology function that turns invalid, a step-size function
        that turns negative, checked here for the whole block since only a round's holders
        step) is raised by every rank together, as an agreed UsageError that leaves the
        communicator usable, not an abort (mpi_teleport/DESIGN.md §9.1)."""
        try:
            return self._planned(t0)
        except UsageError as exc:
            raise collective.agreed(exc)

    def _planned(self, t0: int) -> _Block:
        self._settle()
        phase, top, me = self.phase, self.spec.topology, self.rank
        t1 = max(t0 + 1, min(t0 + BLOCK_ROUNDS, phase.stop))
        self._check_shared(t0, t1)
        if self._overlap:
            block: plan.OverlapBlock | plan.SimpleBlock
            flat = phase.rosters(t0, t1 + 1)
            block = plan.overlap_block_flat(top, flat, self._sizes, me, t0)
            after, after_run, after_token = flat[1:], block.next_run, block.next_token
        else:
            nows = phase.rosters(t0, t1)
            block = plan.simple_block_flat(top, self._entry_rosters(t0, t1), nows, self._sizes,
                                           me, t0)
            after, after_run, after_token = nows, block.run, block.token
        if self._compiler is not None:
            records = self._compiler.records(block)
        else:
            records = [block.step(i) for i in range(t1 - t0)]
        self._block = _Block(t0, t1, records, after, after_run, after_token)
        return self._block

    def _check_shared(self, t0: int, t1: int) -> None:
        """The user's functions every rank shares, for every round of the block, in round
        order (a rank's own plan reads only the rounds it takes part in, and steps only
        when it holds a token): so every rank meets the same first refusal."""
        spec = self.spec
        if hasattr(spec.lr, "__wrapped__"):  # a user's function (contract.checked_lr), not
            for t in range(t0, t1):          # the package's cosine schedule
                spec.lr_at(t)
        if callable(spec.topology):
            from ...core import topology as topo

            for t in range(t0, t1):
                for k in self._sizes:
                    topo.mixing(spec.topology, k, t)

    # -- the round executor's arithmetic (host numpy or device tensors) --------------------
    def _sum(self, weights, inputs) -> None:  # Alg. 1 line 12 / Alg. 3 line 13
        s = self.state
        if self.token_device is None:
            weighted_sum(weights, inputs, s.x, s.work)
        else:
            from .device import weighted_sum as device_sum

            device_sum(weights, inputs, cast("DeviceTokenState", s))  # (a token device)

    def _prepare(self, t: int):
        """The problem's ``prepare`` of round t at this rank (an iterator), or None."""
        prepare = getattr(self.problem, "prepare", None)
        return None if prepare is None else prepare(self._nodes, t)

    def _local_step(self, t: int) -> None:  # Alg. 1 line 10 / Alg. 3 line 8
        """y = x - lr g on this rank's token, from the state's current arrays."""
        s = self.state
        if self.token_device is not None:
            from .device import local_step as device_step

            device_step(self.problem, self.rank, cast("DeviceTokenState", s), t,  # (a token device)
                        self.spec.lr_at(t), self.spec.momentum)
            return
        local_step(self.problem, self._nodes, s.x[None], None if s.v is None else s.v[None], t,
                   self.spec.lr_at(t), self.spec.step_rule, out=s.y[None])

    # -- what the engine reads (collectives) ------------------------------------------------
    def tokens(self, run: int) -> np.ndarray | None:
        """Run ``run``'s token matrix on rank 0 (rows in token order), None elsewhere."""
        s = self.state
        mine = s.x if self.held[0] == run and self.held[1] >= 0 else None
        return self.transport.gather_rows(mine, self.holding[run], len(s.x), s.x.dtype)

    def evaluate(self, problem, x: np.ndarray | None, split: str = "test"):
        """Collective: ``problem.evaluate(x)`` ("test") or ``problem.validate(x)``
        ("validation") of the root's token matrix x, on the root (None elsewhere).

        A problem with chunked evaluation (:mod:`mpi_teleport.core.evaluation`) is evaluated
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
        lo, hi = evaluation.part(problem, split, self._evaluation_place(), tr.size)
        rows = tr.gather_rows_in_order(problem.evaluation_sums(vector, lo, hi, split))
        return evaluation.result(problem, rows, x, split) if self.root else None

    def _evaluation_place(self) -> int:
        """This process's place among the ranks that share an evaluation: its rank (the
        elastic back end: its place among the survivors)."""
        return self.rank

    def training_metrics(self, problem, t: int) -> dict:
        """Collective: every rank's report of round t's batches (its own node's, when it
        was active) gathered on the root and averaged over the round's holders (an exact
        sum: the simulator's numbers whatever the order)."""
        reports = self.transport.gather(problem.training_metrics(t))
        if not self.root:
            return {}
        # (the root: every rank's report)
        return round_means(cast(list, reports), np.concatenate(self.phase.roster(t)))

    def virtual_time_s(self, r: int) -> float | None:
        """The largest logical clock over the ranks (on rank 0) under the latency layer."""
        tr = self.transport  # (has_clock: a ClockedTransport)
        return cast(ClockedTransport, tr).virtual_time_s() if tr.has_clock else None

    def clocks(self, r: int) -> list[float] | None:
        """Every rank's logical clock on rank 0 (a checkpoint keeps them)."""
        if not self.transport.has_clock:
            return None
        return self.transport.gather(float(cast(ClockedTransport, self.transport).clock_us))

    def restore_clock(self, clocks) -> None:
        if clocks and self.transport.has_clock and len(clocks) > self.rank:
            cast(ClockedTransport, self.transport).clock_us = float(clocks[self.rank])

    def interrupt_on(self, asked) -> None:
        """Under the latency layer a signal cuts a long real-clock delay short (the round
        still completes: numbers unchanged)."""
        if self.transport.has_clock:
            cast(ClockedTransport, self.transport).interrupted = asked

    def share(self, fn):
        """fn() on rank 0, its result (or the NonFiniteError or UsageError it raised: a
        non-finite metric, an ``evaluate`` that breaks the Problem contract) on every rank."""
        from ..collective import agreed
        from ...errors import NonFiniteError, UsageError

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

    @property
    def agree_start(self):
        """The transport's non-blocking reduction (runtime/stop_watch.py), or None where
        it has none."""
        return getattr(self.transport, "agree_max_start", None)

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

    # -- the round boundary: nothing to keep or agree on (ElasticBackend: elastic mode) ----
    def keep(self, r: int) -> None:
        """A plain run keeps nothing at a round's start."""

    def enter(self, r: int) -> None:
        """A plain run keeps nothing at a round's start."""

    def settle(self, r: int, ok: bool = True, later: bool = False) -> bool:
        """Nothing to agree on: a failed rank ends a plain run (MPI_Abort)."""
        return ok

    def recover(self, r: int) -> None:
        """Never called: a plain run loses no rank it could go on without."""
        raise RuntimeError("a plain MPI run does not survive lost ranks (elastic mode does)")

    def join(self, r: int) -> None:
        """Never called: only an elastic run has spares that join."""
        raise RuntimeError("only an elastic run has spares that join")

    def set_handover(self, export, take) -> None:
        """Nothing to hand over: no spare joins a plain run."""

    def close(self) -> None:
        """Free the persistent channels (they hold this backend's buffers) and close the
        transport's part of the run (the latency layer sends what it still holds)."""
        s = self.state
        if self._compiler is not None and s is not None:
            # (compiled: a transport with channels)
            cast(ChannelTransport, self.transport).release_channels(
                [s.x, s.y, s.v, s.v_in, *s.inbox])
        self.transport.close()
