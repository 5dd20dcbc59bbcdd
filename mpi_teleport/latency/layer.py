"""The latency layer under MPI: a transport wrapper the algorithms never see.

A message from node i to node j becomes visible to j no earlier than delta(i, j) after
it was posted (:mod:`.model`). Links are independent: messages to (or from) several
neighbours are delayed concurrently, so an exchange costs its slowest link, not the sum.

Two clocks:

* ``real``: the sender posts a message to j only at post time + delta(i, j);
  :meth:`LatencyTransport.wait` busy-polls, posting due sends and testing requests.
  Nothing needs synchronised clocks. Honest only while ranks <= cores.
* ``virtual``: no real waiting. Every rank keeps a logical clock (microseconds); it
  advances by the compute time of each local step (the CPU time spent in the problem's
  ``gradient``, or ``--compute-time US`` per step) and, on every receive, to
  max(own clock, sender clock + delta(i, j) + bytes / bandwidth). Work a rank does while
  it waits (:meth:`LatencyTransport.meanwhile`: the next round's ``prepare``) overlaps
  the wait: the clock after it is max(clock + that CPU time, the arrivals). The sender's clock
  travels in a companion float64 message on a duplicate transport (same source and
  tag, so MPI's matching pairs it with its data message). Meaningful on any host.

With shared host links (``hosts:``) a message's bandwidth time depends on the whole
communication phase (:class:`~.model.HostLinks`); the back end hands the layer those
loads before each round (``links``, by tag, from
:func:`mpi_teleport.latency.virtual_clock.round_links`, the simulator's own computation).
Messages outside the rounds (the probe) count alone on their links. A message leaves
when the links it crosses are free of earlier phases' messages as its rank knows them
(``busy``, :meth:`~.model.LatencyModel.departure_us`): the clock message carries the
departure and the sender's knowledge, which the receiver merges (max), as the oracle
does. A resumed run starts that knowledge afresh (a checkpoint keeps the clocks only).

The logical clock is kept under both clocks; records then get ``virtual_time_s`` (max
over ranks, gathered at logging rounds) beside ``time_s``. Latency changes time, never
numbers. The simulator computes the same virtual time centrally
(:mod:`mpi_teleport.latency.virtual_clock`). MPI itself stays in the transport: this layer uses
only its point-to-point and request methods.
"""
from __future__ import annotations

import heapq
import math
import os
import sys
import time

import numpy as np

from .model import CLOCKS, LatencyModel, LatencySettings

_DONE = object()  # the end of an iterator (next's default)
_SLICE_S = 0.05  # longest uninterrupted sleep: a signal is honoured within this
_SPIN_MARGIN_S = 5e-4  # sleep no closer than this to a due time (time.sleep overshoots ~0.1 ms)


class LatencyPending:
    """Requests of one exchange plus the clock stamps to apply when it completes."""

    def __init__(self):
        self.requests: list = []
        self.stamps: list = []  # (source, nbytes, 1-element float64 buffer, HostLinks | None)
        self.keep: list = []  # stamp send buffers, alive until wait()


class LatencyTransport:
    """Wraps a :class:`mpi_teleport.runtime.transport.Transport`: a
    :class:`~mpi_teleport.core.interfaces.ClockedTransport` (per-round messages, each with its
    sender's clock; no persistent channels), plus, with ``clock='real'``, real
    sender-side delays. Every collective first sends out what is still deferred."""

    has_channels = False
    has_clock = True

    def __init__(self, inner, model: LatencyModel, clock: str = "real"):
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
        self.inner = inner
        self.rank, self.size = inner.rank, inner.size
        self.model = model
        self.real = clock == "real" and model.active
        self.clock_us = 0.0
        self._stamps = inner.dup()  # companion clock messages: same (source, tag)
        self._deferred: list = []  # heap of (due, seq, dest, tag, data copy, stamp)
        self._seq = 0
        self._inflight: list = []  # posted deferred sends ([requests], data, stamp), completed lazily
        self._oversubscribed = self.size > (os.cpu_count() or 1)
        # the host links' loads of the round being run, by tag (``hosts:``; set by the back
        # end before each round): {} counts every message alone on its links
        self.links: dict = {}
        # hosts: this rank's knowledge of when every host link is free of the messages on
        # it (LatencyModel.departure_us), sent after the clock in every clock message and
        # merged (max) on receipt; empty without hosts:
        self.busy = np.zeros(model.link_slots(self.size))
        # CPU time of work done while waiting (meanwhile), overlapping the next wait
        self._beside_us = 0.0
        # Whether a stop was asked (a signal): the run's Keeper sets it. A waiting rank then
        # posts its deferred sends at once, so the round ends and the ranks reach the round
        # where they agree to stop and checkpoint; latency changes time, never numbers.
        self.interrupted = lambda: False

    @property
    def shares_host_links(self) -> bool:
        """``hosts:`` in the model: messages that cross a host link share it."""
        return bool(self.model.hosts)

    def plan_round(self, phase, t: int, topology, variant: str, momentum: bool,
                   nbytes: int) -> None:
        """The host links' loads of round t's phases, by tag, as the simulator's oracle
        computes them (:func:`~mpi_teleport.latency.virtual_clock.round_links`)."""
        from .virtual_clock import round_links, round_plan

        msgs = round_plan(phase, t, topology, variant, momentum)
        links = round_links(self.model, msgs, variant, momentum, nbytes, self.size)
        self.links = {self.tag(t, kind): value for kind, value in links.items()}

    # the Transport interface ------------------------------------------------
    def tag(self, t: int, kind: int) -> int:
        return self.inner.tag(t, kind)

    def advance(self, us: float) -> None:
        """Add compute time to the logical clock."""
        self.clock_us += us

    def post_recvs(self, recvs, pending: LatencyPending | None = None) -> LatencyPending:
        pending = pending or LatencyPending()
        for source, tag, buf in recvs:
            if source == self.rank:
                self.inner.post_recvs([(source, tag, buf)], pending)
                continue
            stamp = np.empty(1 + len(self.busy))
            pending.requests += self.inner.irecv(buf, source, tag)
            pending.requests += self._stamps.irecv(stamp, source, tag)
            pending.stamps.append((source, buf.nbytes, stamp, self.links.get(tag)))
        return pending

    def post_sends(self, sends, pending: LatencyPending | None = None) -> LatencyPending:
        pending = pending or LatencyPending()
        now = time.perf_counter()
        # hosts: the messages of one call (one communication phase) leave when the links
        # they cross are free, as this rank knows them now; then it knows them busy with
        # its own messages, and every clock message carries that (the oracle's _shared)
        leave = {}
        if len(self.busy):
            known = self.busy.copy()
            for e, (dest, tag, buf) in enumerate(sends):
                if dest != self.rank:
                    leave[e] = float(self.model.departure_us(self.rank, dest, self.clock_us,
                                                             self.busy))
                    links = self.links.get(tag)
                    end = leave[e] + float(self.model.wire_us(self.rank, dest, buf.nbytes, links))
                    self.model.occupy(known, self.rank, dest, end)
            self.busy = known
        for e, (dest, tag, buf) in enumerate(sends):
            if dest == self.rank:
                self.inner.post_sends([(dest, tag, buf)], pending)
                continue
            stamp = np.concatenate(([leave.get(e, self.clock_us)], self.busy))
            delay = (self.model.delay_us(self.rank, dest, buf.nbytes, self.links.get(tag))
                     + stamp[0] - self.clock_us if self.real else 0.0)
            if delay > 0:  # real clock: hand it to MPI only at post time + delay
                heapq.heappush(self._deferred, (now + delay * 1e-6, self._seq, dest, tag,
                                                np.array(buf, copy=True), stamp))
                self._seq += 1
            else:
                pending.requests += self.inner.isend(buf, dest, tag)
                pending.requests += self._stamps.isend(stamp, dest, tag)
                pending.keep.append(stamp)
        return pending

    def exchange(self, sends, recvs) -> None:
        pending = self.post_recvs(recvs)
        self.post_sends(sends, pending)
        self.wait(pending)

    def beside(self, us: float) -> None:
        """Add compute time done while waiting (:meth:`meanwhile`): it overlaps the wait
        that follows, the clock then being max(clock + it, the arrivals)."""
        self._beside_us += us

    def meanwhile(self, pending: LatencyPending, work) -> None:
        """Advance ``work`` while ``pending`` completes (interfaces.TokenTransport.meanwhile):
        the inner transport tests the requests between steps; with the real clock, the
        deferred sends that fall due are posted between them too."""
        if self.real and self._deferred:
            work = self._posting_due(work)
        self.inner.meanwhile(pending.requests, work)

    def _posting_due(self, work):
        for step in work:
            self._post_due(math.inf if self.interrupted() else time.perf_counter())
            yield step

    def wait(self, pending: LatencyPending) -> None:
        reqs = pending.requests
        if reqs:
            if self.real and self._deferred:
                testall = self.inner.testall
                while True:  # busy-poll: post due sends, test the requests
                    self._post_due(math.inf if self.interrupted() else time.perf_counter())
                    if testall(reqs):
                        break
                    os.sched_yield()  # cheap when idle; on a shared host it keeps us schedulable
            else:
                self.inner.wait_all(reqs)
            reqs.clear()
        self.inner.wait(pending)  # local (self) messages: checks none is left unmatched
        self.clock_us += self._beside_us  # work done meanwhile, overlapping the arrivals
        self._beside_us = 0.0
        for source, nbytes, stamp, links in pending.stamps:
            arrival = stamp[0] + self.model.delay_us(source, self.rank, nbytes, links)
            if arrival > self.clock_us:
                self.clock_us = arrival
            if len(self.busy):  # the sender's knowledge of the host links
                np.maximum(self.busy, stamp[1:], out=self.busy)
        pending.stamps.clear()
        pending.keep.clear()
        if self._inflight:  # completed deferred sends release their buffers
            self._inflight = [f for f in self._inflight if not self.inner.testall(f[0])]

    def _post_due(self, now: float) -> None:
        while self._deferred and self._deferred[0][0] <= now:
            _, _, dest, tag, data, stamp = heapq.heappop(self._deferred)
            self._inflight.append((self.inner.isend(data, dest, tag)
                                   + self._stamps.isend(stamp, dest, tag), data, stamp))

    def flush(self) -> None:
        """Post every deferred send, waiting (sleep, then spin) until each is due."""
        while self._deferred:
            if self.interrupted():
                self._post_due(math.inf)
                break
            gap = self._deferred[0][0] - time.perf_counter()
            if gap > _SPIN_MARGIN_S:  # in slices, so that a signal is seen within one
                time.sleep(min(gap - _SPIN_MARGIN_S, _SLICE_S))
            elif gap > 0:
                os.sched_yield()
            self._post_due(time.perf_counter())

    def _settle(self) -> None:
        """After a collective every earlier message was received: complete the sends."""
        if self._inflight:
            self.inner.wait_all([r for f in self._inflight for r in f[0]])
            self._inflight = []

    # collectives (logging rounds, start-up): deferred sends go out first ------
    def gather_rows(self, *args, **kwargs):
        self.flush()
        return self.inner.gather_rows(*args, **kwargs)

    def bcast(self, obj):
        self.flush()
        out = self.inner.bcast(obj)
        self._settle()
        return out

    def barrier(self) -> None:
        self.flush()
        self.inner.barrier()
        self._settle()

    def bcast_array(self, buf: np.ndarray) -> np.ndarray:
        self.flush()
        return self.inner.bcast_array(buf)

    def gather_rows_in_order(self, rows: np.ndarray) -> np.ndarray | None:
        self.flush()
        return self.inner.gather_rows_in_order(rows)

    def gather(self, obj) -> list | None:
        self.flush()
        return self.inner.gather(obj)

    def allgather(self, obj) -> list:
        self.flush()
        return self.inner.allgather(obj)

    def agree_max(self, value: int) -> int:
        self.flush()
        return self.inner.agree_max(value)

    def agree_max_start(self, values):
        self.flush()
        return self.inner.agree_max_start(values)

    def reduce_max(self, value: float) -> float | None:
        self.flush()
        return self.inner.reduce_max(value)

    def abort(self, code: int = 1) -> None:
        self.inner.abort(code)

    def close(self) -> None:
        """Send what is still deferred and release the clock messages' communicator."""
        self.flush()
        self._settle()
        self._stamps.free()

    def virtual_time_s(self) -> float | None:
        """Max of the logical clocks over ranks, in seconds, on rank 0 (None elsewhere).
        Collective; leaves every clock unchanged (logging takes no virtual time)."""
        self.flush()
        top = self.inner.reduce_max(self.clock_us)
        return None if top is None else top / 1e6


class TimedProblem:
    """The problem as the back end's local step sees it: each ``gradient`` call (one
    local step) adds its compute time to the layer's clock: the modelled compute time
    of ``settings`` (a :class:`~.model.LatencySettings`, ``--compute-time``) when given, else the CPU time of the calling thread spent in it (so time a rank spends
    descheduled on an oversubscribed host is not counted; for work off the CPU, e.g. a
    GPU, or multithreaded gradients, give --compute-time).

    Work drawn ahead (``prepare``, done while the rank waits) counts through
    :meth:`LatencyTransport.beside`, overlapping that wait; with ``--compute-time`` the
    fixed time per gradient covers it.

    It offers what a local step uses (``gradient``, ``after_step``, ``prepare``) and the problem's
    ``dim``, ``dtype`` and ``token_device``; everything else (evaluation) the engine asks
    of the problem itself."""

    def __init__(self, problem, layer: "LatencyTransport", settings: LatencySettings):
        self._problem, self._layer, self._fixed = problem, layer, settings.compute_time
        self.dim, self.dtype = problem.dim, problem.dtype
        self.token_device = getattr(problem, "token_device", None)  # (optional members)
        self._after_step = getattr(problem, "after_step", None)
        self._prepare = getattr(problem, "prepare", None)

    def gradient(self, nodes, x, t, out=None):
        if self._fixed is not None:
            self._layer.advance(self._fixed)
            return self._problem.gradient(nodes, x, t, out=out)
        start = time.thread_time()  # CPU time: a descheduled rank does not count as computing
        g = self._problem.gradient(nodes, x, t, out=out)
        self._layer.advance((time.thread_time() - start) * 1e6)
        return g

    def prepare(self, nodes, t):
        """The problem's ``prepare`` (None without one), each step's CPU time counted as
        work beside the wait it is done in."""
        work = None if self._prepare is None else self._prepare(nodes, t)
        if work is None or self._fixed is not None:
            return work
        return self._timed(work)

    def _timed(self, work):
        steps, beside = iter(work), self._layer.beside
        while True:
            start = time.thread_time()
            done = next(steps, _DONE) is _DONE
            beside((time.thread_time() - start) * 1e6)
            if done:
                return
            yield

    def after_step(self, nodes, y) -> None:
        """The problem's own ``after_step``, if it has one."""
        if self._after_step is not None:
            self._after_step(nodes, y)


def warn_oversubscribed(layer: "LatencyTransport") -> None:
    """Real delays are not faithful when ranks exceed cores: say so once (rank 0)."""
    if layer.real and layer._oversubscribed and layer.rank == 0:
        print(f"warning: --clock real with {layer.size} ranks on {os.cpu_count()} cores: real "
              f"delays are not faithful when ranks exceed cores; use --clock virtual",
              file=sys.stderr, flush=True)


