"""Spans: what a rank did, when, in which round, recorded into a buffer allocated once.

A span is one part of a round (its local step, the gradient inside it, the wait for its
messages, the gossip sum, ...) or of a round boundary (logging, evaluation, a checkpoint,
elastic agreement), with its start and end on this process's ``time.perf_counter`` (or, in
the simulator under the virtual clock, on the node's logical clock) and the round, node,
token and peer it belongs to. The hot path pays two clock reads and one row (a tuple)
stored in a slot of a list allocated once; the rows become a numpy structured array
(:data:`SPAN`) only when they are written out (a numpy row set from Python costs about
0.25 us, a list slot 0.02 us; a span costs about 0.4 us of CPU in all). When tracing is off
the caller holds ``None`` instead of a :class:`Spans` and pays one ``is not None`` test.

Bounded: only rounds ``first <= t < first + rounds * every`` with ``(t - first) % every ==
0`` are recorded (:meth:`Spans.at`), and a full buffer drops further spans (counted, never
grown), so a trace never costs more memory than it was given.
"""
from __future__ import annotations

import sys
import time

import numpy as np

# The parts of a round and of its boundary. The code is the span's ``kind`` column; the
# name is the Chrome trace event's name.
KINDS = (
    "round",      # one round at this rank (the envelope of the parts below)
    "step",       # the local step: y = x - lr g (Alg. 1 line 10 / Alg. 3 line 8), optimizer included
    "gradient",   # the problem's gradient, inside the step
    "post",       # receives started (Alg. 3 line 12 posted before the step)
    "send",       # sends started (Alg. 3 line 9 / Alg. 1 line 11)
    "wait",       # waiting for this round's messages
    "prepare",    # the next step's x-free work done while waiting (a problem's prepare)
    "sum",        # the gossip sum x = sum_m W[j, m] y_m (Alg. 3 line 13 / Alg. 1 line 12)
    "handover",   # Alg. 1 line 8: the token's model (and momentum) moving to its holder
    "plan",       # planning (and compiling) a block of rounds
    "log",        # a logging boundary: everything below, gathered and recorded
    "barrier",    # the barrier before a record's time (every rank finished the round)
    "gather",     # the token rows gathered to the root
    "evaluate",   # evaluating the model (the root, or every rank's slice)
    "checkpoint", # a checkpoint written (or the signal agreement at a checkpoint round)
    "agree",      # elastic: the survivors agree that nothing failed
    "recover",    # elastic: going on without the lost nodes
    "join",       # a hot spare taking a node over
    "keep",       # elastic: a round's start kept for a recovery
    "flush",      # the trace itself written out
)
KIND = {name: code for code, name in enumerate(KINDS)}
ROUND, STEP, GRADIENT, POST, SEND, WAIT, PREPARE, SUM, HANDOVER, PLAN = range(10)
LOG, BARRIER, GATHER, EVALUATE, CHECKPOINT, AGREE, RECOVER, JOIN, KEEP, FLUSH = range(10, 20)

# Communication (time spent moving or waiting for data, or in a collective) against
# computation: the summary and the trace's categories tell them apart.
COMMUNICATION = frozenset({"post", "send", "wait", "handover", "barrier", "gather", "agree"})


def category(name: str) -> str:
    """'communication', 'computation' or 'round' (the envelope)."""
    if name == "round":
        return "round"
    return "communication" if name in COMMUNICATION else "computation"


SPAN = np.dtype([("kind", "u1"), ("start", "f8"), ("end", "f8"), ("round", "i8"),
                 ("node", "i4"), ("token", "i4"), ("peer", "i4"), ("cpu", "f8")])
NAN = float("nan")  # (the cpu column where the thread's CPU time is not measured)

# What a round records at most, for the buffer's size: round, plan, post, step, gradient,
# send, prepare, wait, sum, handover, and a few waits of a pipelined sum.
SPANS_PER_ROUND = 16
BOUNDARY_SPANS = 4096  # logging, checkpoints, elastic agreements beyond the rounds
MAX_ROWS = 1 << 18  # a buffer's rows at most (about 50 MiB of rows): the simulator's nodes


class Spans:
    """This process's span buffer.

    ``capacity`` slots are allocated once; ``rounds`` and ``every`` bound what is recorded
    (the first ``rounds`` sampled rounds from ``first``, one in ``every``). The round and
    the token of the current round are set by :meth:`at` and stamped on every span until
    the next call, so the hot path passes only the kind and the times.
    """

    clock = staticmethod(time.perf_counter)

    def __init__(self, capacity: int, node: int = 0, rounds: int = 1000, every: int = 1,
                 first: int = 0):
        self.capacity = max(1, int(capacity))
        self.buf: list = [None] * self.capacity  # row tuples in SPAN's field order
        self.n = 0  # rows used
        self.flushed = 0  # rows already written out (parts)
        self.dropped = 0  # spans that did not fit
        self.node, self.round, self.token = int(node), -1, -1
        self.rounds, self.every, self.first = int(rounds), max(1, int(every)), int(first)
        self.sampled = int(rounds)  # rounds it will record at most (make_spans: the run's)

    # -- sampling --------------------------------------------------------------------------
    def wants(self, t: int) -> bool:
        """Whether round t is recorded."""
        rel = t - self.first
        return 0 <= rel < self.rounds * self.every and rel % self.every == 0

    def at(self, t: int, token: int = -1) -> "Spans | None":
        """This buffer, set to round t and ``token``, when round t is recorded; else None
        (the caller then records nothing in it)."""
        rel = t - self.first
        if rel < 0 or rel >= self.rounds * self.every or rel % self.every:
            return None
        self.round, self.token = t, token
        return self

    def boundary(self, r: int) -> "Spans":
        """This buffer, set to round boundary r (logging, checkpoints: always recorded
        while the buffer has room; they are few)."""
        self.round, self.token = r, -1
        return self

    # -- recording -------------------------------------------------------------------------
    def begin(self, kind: int) -> float:
        """The start of a span of ``kind`` (its clock reading)."""
        return self.clock()

    def end(self, kind: int, start: float, peer: int = -1) -> None:
        """The span of ``kind`` from ``start`` to now, in the current round."""
        end = self.clock()
        i = self.n  # (add()'s body: this is the hot path)
        if i >= self.capacity:
            self.dropped += 1
            return
        self.buf[i] = (kind, start, end, self.round, self.node, self.token, peer, NAN)
        self.n = i + 1

    def cancel(self, kind: int) -> None:
        """A span begun and not recorded (the round of an idle rank)."""

    def add(self, kind: int, start: float, end: float, peer: int = -1,
            round: int | None = None, node: int | None = None, token: int | None = None,
            cpu: float = NAN) -> None:
        """A span with its times given (and, where given, its round, node and token, and
        the CPU seconds the thread spent in it)."""
        i = self.n
        if i >= self.capacity:
            self.dropped += 1
            return
        self.buf[i] = (kind, start, end, self.round if round is None else round,
                       self.node if node is None else node,
                       self.token if token is None else token, peer, cpu)
        self.n = i + 1

    def reserve(self, per_round: int) -> None:
        """Room for ``per_round`` spans in every sampled round (the simulator records
        each active node's; at most :data:`MAX_ROWS` rows), before anything is recorded."""
        rows = min(MAX_ROWS, self.sampled * int(per_round) + BOUNDARY_SPANS)
        if self.n == 0 and rows > self.capacity:
            self.buf.extend([None] * (rows - self.capacity))
            self.capacity = rows

    def recorded(self) -> np.ndarray:
        """The spans recorded so far, as a numpy structured array (:data:`SPAN`)."""
        return np.array(self.buf[:self.n], dtype=SPAN)


class NvtxSpans(Spans):
    """Spans that are also NVTX ranges (Nsight Systems shows them on a GPU)."""

    def __init__(self, nvtx, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._push, self._pop = nvtx.range_push, nvtx.range_pop

    def begin(self, kind: int) -> float:
        self._push(KINDS[kind])
        return self.clock()

    def end(self, kind: int, start: float, peer: int = -1) -> None:
        self.add(kind, start, self.clock(), peer)
        self._pop()

    def cancel(self, kind: int) -> None:
        self._pop()


class CpuSpans(Spans):
    """Spans that also record the CPU time the thread spent in each (``time.thread_time``:
    less than the span where the process waited for a core), for studies of an
    oversubscribed machine (``$MPI_TELEPORT_TRACE_CPU``). Spans of one kind never nest in
    each other, so one start per kind suffices."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cpu0 = [0.0] * len(KINDS)
        self._thread = time.thread_time

    def begin(self, kind: int) -> float:
        self._cpu0[kind] = self._thread()
        return self.clock()

    def end(self, kind: int, start: float, peer: int = -1) -> None:
        self.add(kind, start, self.clock(), peer, cpu=self._thread() - self._cpu0[kind])


def nvtx_module(modules=None):
    """``torch.cuda.nvtx`` when this process uses CUDA through torch (torch imported and
    CUDA initialised: a GPU problem has put something on the device), else None. Never
    imports torch: a process that has not imported it does not use CUDA through it."""
    torch = (sys.modules if modules is None else modules).get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if not (cuda.is_available() and cuda.is_initialized()):
            return None
        return cuda.nvtx
    except Exception:  # (a torch without CUDA support, or a broken one: no ranges)
        return None


def sampled_rounds(rounds: int, every: int, total_rounds: int) -> int:
    """Rounds a buffer records at most: ``rounds``, no more than the run samples."""
    return min(int(rounds), -(-max(0, int(total_rounds)) // max(1, int(every))) + 1)


def capacity_for(rounds: int, every: int, total_rounds: int) -> int:
    """Rows enough for ``rounds`` sampled rounds (no more than the run has) and its
    boundaries."""
    return sampled_rounds(rounds, every, total_rounds) * SPANS_PER_ROUND + BOUNDARY_SPANS


def make_spans(rounds: int, every: int, total_rounds: int, node: int = 0, first: int = 0,
               nvtx="auto", cpu: bool = False) -> Spans:
    """A span buffer for a run of ``total_rounds``: with ``cpu`` each span's CPU time too
    (:class:`CpuSpans`), else NVTX ranges too where torch uses CUDA (``nvtx``: "auto", or a
    module, or None)."""
    cap = capacity_for(rounds, every, total_rounds)
    module = None if cpu else (nvtx_module() if nvtx == "auto" else nvtx)
    if cpu:
        spans: Spans = CpuSpans(cap, node, rounds, every, first)
    elif module is not None:
        spans = NvtxSpans(module, cap, node, rounds, every, first)
    else:
        spans = Spans(cap, node, rounds, every, first)
    spans.sampled = sampled_rounds(rounds, every, total_rounds)
    return spans
