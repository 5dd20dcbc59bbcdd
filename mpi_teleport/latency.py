"""Injectable network latency (DESIGN.md §6): a transport wrapper the algorithms never see.

A message from node i to node j becomes visible to j no earlier than delta(i, j) after
it was posted. Models (``--latency SPEC``, microseconds, node ids = ranks, 0-based)::

    none                 no delay (default)
    const:US             delta(i, j) = US for every i != j
    mod:TAU              delta(i, j) = TAU * (|i - j| mod 24)   (the paper's Sec. 5.3)
    matrix:FILE.csv      delta(i, j) = row i, column j of an n x n CSV (sender i, receiver j)
    ...,bw:GBPS          plus a per-link bandwidth term: bytes * 8 / (GBPS * 1e9) seconds
                         (``bw:GBPS`` alone: bandwidth only). GBPS is in gigabit/s.

Self-messages are always free. Links are independent: messages to (or from) several
neighbours are delayed concurrently, so an exchange costs its slowest link, not the sum.

Two clocks (``--clock``):

* ``real``: the sender posts (MPI Isend) a message to j only at post time + delta(i, j);
  :meth:`LatencyTransport.wait` busy-polls, posting due sends and testing requests.
  Nothing needs synchronised clocks. Honest only while ranks <= cores.
* ``virtual``: no real waiting. Every rank keeps a logical clock (microseconds); it
  advances by the compute time of each local step (the CPU time spent in the problem's
  ``gradient``, or ``--compute-time US`` per step) and, on every receive, to
  max(own clock, sender clock + delta(i, j) + bytes / bandwidth). The sender's clock
  travels in a companion float64 message on a duplicate communicator (same source and
  tag, so MPI's matching pairs it with its data message). Meaningful on any host.

The logical clock is kept under both clocks; ``metrics.jsonl`` then gets
``virtual_time_s`` (max over ranks, gathered at logging rounds) beside ``time_s``.
Latency changes time, never numbers. The simulator computes the same virtual time by
:class:`Oracle` (exactly equal with ``--compute-time``).

    python -m mpi_teleport.latency probe --latency matrix:d.csv   # under mpirun: see probe()
"""
from __future__ import annotations

import heapq
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import UsageError

MOD_BASE = 24  # the paper's mod(|i - j|, 24)
CLOCKS = ("real", "virtual")
_USAGE = ("use none, const:US, mod:TAU or matrix:FILE.csv (microseconds), optionally "
          "followed by ,bw:GBPS")
_SPIN_MARGIN_S = 5e-4  # sleep no closer than this to a due time (time.sleep overshoots ~0.1 ms)


# --------------------------------------------------------------------------- models
@dataclass(frozen=True, eq=False)
class LatencyModel:
    """delta(i, j) in microseconds; vectorised over numpy arrays of node ids."""

    kind: str = "none"  # none, const, mod, matrix
    value_us: float = 0.0  # const: US; mod: TAU
    matrix_us: np.ndarray | None = field(default=None, repr=False)
    bw_gbps: float | None = None
    spec: str = "none"

    @property
    def active(self) -> bool:
        return self.kind != "none" or self.bw_gbps is not None

    @property
    def us_per_byte(self) -> float:
        return 0.0 if self.bw_gbps is None else 8e-3 / self.bw_gbps

    def base_us(self, i, j):
        """Latency term of i -> j (no self-message special case, no bandwidth)."""
        if self.kind == "mod":
            return self.value_us * (np.abs(np.subtract(i, j)) % MOD_BASE)
        if self.kind == "matrix":
            return self.matrix_us[i, j]
        return self.value_us  # const (none: 0)

    def delay_us(self, i, j, nbytes):
        """delta(i, j) + nbytes / bandwidth, microseconds; 0 when i == j. Scalars give a
        float; arrays an array (the same float operations either way, so the simulator's
        oracle and the MPI ranks agree bit for bit)."""
        total = self.base_us(i, j) + np.multiply(nbytes, self.us_per_byte)
        if np.ndim(i) == 0 and np.ndim(j) == 0:
            return 0.0 if int(i) == int(j) else float(total)
        return np.where(np.equal(i, j), 0.0, total)

    def describe(self) -> str:
        return self.spec


NONE = LatencyModel()


def _number(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--latency {spec!r}: {what} must be a number, got {text!r}; {_USAGE}") from None
    if not math.isfinite(value):
        raise UsageError(f"--latency {spec!r}: {what} must be finite, got {text!r}")
    return value


def _load_matrix(path: str, n: int | None, spec: str) -> np.ndarray:
    p = Path(path).expanduser()
    if not path:
        raise UsageError(f"--latency {spec!r}: give the CSV file, e.g. matrix:delays.csv")
    if not p.is_file():
        raise UsageError(f"--latency {spec!r}: file {path!r} not found; give an n x n CSV of "
                         f"microseconds (row = sender, column = receiver)")
    try:
        m = np.loadtxt(p, delimiter=",", dtype=np.float64, ndmin=2, comments="#")
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "unreadable"
        raise UsageError(f"--latency {spec!r}: {path} is not a numeric CSV ({first}); give an "
                         f"n x n table of microseconds, comma-separated") from None
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.size == 0:
        raise UsageError(f"--latency {spec!r}: {path} is {m.shape[0]} x {m.shape[1]}, not square; "
                         f"give an n x n table (row = sender, column = receiver)")
    if n is not None and m.shape[0] != n:
        raise UsageError(f"--latency {spec!r}: {path} is {m.shape[0]} x {m.shape[1]} but there are "
                         f"{n} nodes; give an {n} x {n} table")
    if not np.isfinite(m).all():
        i, j = np.argwhere(~np.isfinite(m))[0]
        raise UsageError(f"--latency {spec!r}: {path} has a non-finite entry at row {i}, column {j}; "
                         f"all delays must be finite microseconds")
    if (m < 0).any():
        i, j = np.argwhere(m < 0)[0]
        raise UsageError(f"--latency {spec!r}: {path} has a negative delay {m[i, j]:g} at row {i}, "
                         f"column {j}; delays must be >= 0")
    m = m.copy()
    np.fill_diagonal(m, 0.0)  # self-messages are free
    m.setflags(write=False)
    return m


def parse_spec(spec, n: int | None = None) -> LatencyModel:
    """``--latency`` text -> LatencyModel, or UsageError saying what is wrong and what to do.
    ``n`` (the number of nodes) checks a matrix's shape."""
    if spec is None:
        return NONE
    text = str(spec).strip()
    if not text:
        raise UsageError(f"--latency is empty; {_USAGE}")
    parts = re.split(r",(?=\s*bw\s*:)", text, flags=re.IGNORECASE)  # a path may hold commas
    model_part, extras = parts[0].strip(), [p.strip() for p in parts[1:]]
    if model_part.lower().startswith("bw:") or model_part.lower().startswith("bw "):
        extras.insert(0, model_part)
        model_part = "none"
    if len(extras) > 1:
        raise UsageError(f"--latency {spec!r}: bw: given {len(extras)} times; give it once")
    bw = None
    if extras:
        _, _, value = extras[0].partition(":")
        bw = _number(value.strip(), "the bandwidth (bw:GBPS, gigabit/s)", text)
        if bw <= 0:
            raise UsageError(f"--latency {spec!r}: the bandwidth must be > 0 Gbit/s, got {value.strip()}")
    name, sep, arg = model_part.partition(":")
    name = name.strip().lower()
    arg = arg.strip()
    if name == "none":
        if sep:
            raise UsageError(f"--latency {spec!r}: 'none' takes no value; {_USAGE}")
        return LatencyModel("none", bw_gbps=bw, spec=text)
    if name in ("const", "mod"):
        if not sep or not arg:
            unit = "US" if name == "const" else "TAU"
            raise UsageError(f"--latency {spec!r}: give the value in microseconds, e.g. {name}:5 "
                             f"({name}:{unit})")
        what = "the delay (const:US)" if name == "const" else "tau (mod:TAU)"
        value = _number(arg, what, text)
        if value < 0:
            raise UsageError(f"--latency {spec!r}: {what} must be >= 0 microseconds, got {arg}")
        return LatencyModel(name, value_us=value, bw_gbps=bw, spec=text)
    if name == "matrix":
        return LatencyModel("matrix", matrix_us=_load_matrix(arg, n, text), bw_gbps=bw, spec=text)
    raise UsageError(f"--latency {spec!r}: unknown model {name!r}; {_USAGE}")


def check_compute_time(value) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--compute-time must be a finite number of microseconds >= 0, got {value}")


def layer_active(cfg) -> bool:
    """Whether a run needs the layer: any latency, the virtual clock, or a modelled compute time."""
    return (str(getattr(cfg, "latency", "none")).strip().lower() != "none"
            or getattr(cfg, "clock", "real") == "virtual"
            or getattr(cfg, "compute_time", None) is not None)


# --------------------------------------------------------------------------- MPI layer
class LatencyPending:
    """Requests of one exchange plus the clock stamps to apply when it completes."""

    def __init__(self):
        self.requests: list = []
        self.stamps: list = []  # (source, nbytes, 1-element float64 buffer)
        self.keep: list = []  # stamp send buffers, alive until wait()


class LatencyTransport:
    """Wraps a :class:`mpi_teleport.transport.Transport`; same interface, plus a logical
    clock (``clock_us``) and, with ``clock='real'``, real sender-side delays."""

    def __init__(self, inner, model: LatencyModel, clock: str = "real"):
        from mpi4py import MPI

        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
        self._mpi = MPI
        self.inner = inner
        self.comm = inner.comm
        self.rank, self.size = inner.rank, inner.size
        self.model = model
        self.real = clock == "real" and model.active
        self.clock_us = 0.0
        self._stamps = inner.comm.Dup()  # companion clock messages: same (source, tag)
        self._deferred: list = []  # heap of (due, seq, dest, tag, data copy, stamp)
        self._seq = 0
        self._inflight: list = []  # posted deferred sends (req, req, data, stamp), completed lazily
        self._oversubscribed = self.size > (os.cpu_count() or 1)

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
            stamp = np.empty(1)
            pending.requests.append(self.comm.Irecv(buf, source, tag))
            pending.requests.append(self._stamps.Irecv(stamp, source, tag))
            pending.stamps.append((source, buf.nbytes, stamp))
        return pending

    def post_sends(self, sends, pending: LatencyPending | None = None) -> LatencyPending:
        pending = pending or LatencyPending()
        now = time.perf_counter()
        for dest, tag, buf in sends:
            if dest == self.rank:
                self.inner.post_sends([(dest, tag, buf)], pending)
                continue
            stamp = np.array([self.clock_us])
            delay = self.model.delay_us(self.rank, dest, buf.nbytes) if self.real else 0.0
            if delay > 0:  # real clock: hand it to MPI only at post time + delay
                heapq.heappush(self._deferred, (now + delay * 1e-6, self._seq, dest, tag,
                                                np.array(buf, copy=True), stamp))
                self._seq += 1
            else:
                pending.requests.append(self.comm.Isend(buf, dest, tag))
                pending.requests.append(self._stamps.Isend(stamp, dest, tag))
                pending.keep.append(stamp)
        return pending

    def exchange(self, sends, recvs) -> None:
        pending = self.post_recvs(recvs)
        self.post_sends(sends, pending)
        self.wait(pending)

    def wait(self, pending: LatencyPending) -> None:
        reqs = pending.requests
        if reqs:
            if self.real and self._deferred:
                Testall = self._mpi.Request.Testall
                while True:  # busy-poll: post due sends, test the requests
                    self._post_due(time.perf_counter())
                    if Testall(reqs):
                        break
                    os.sched_yield()  # cheap when idle; on a shared host it keeps us schedulable
            else:
                self._mpi.Request.Waitall(reqs)
            reqs.clear()
        self.inner.wait(pending)  # local (self) messages: checks none is left unmatched
        for source, nbytes, stamp in pending.stamps:
            arrival = stamp[0] + self.model.delay_us(source, self.rank, nbytes)
            if arrival > self.clock_us:
                self.clock_us = arrival
        pending.stamps.clear()
        pending.keep.clear()
        if self._inflight:  # completed deferred sends release their buffers
            self._inflight = [f for f in self._inflight if not (f[0].Test() and f[1].Test())]

    def _post_due(self, now: float) -> None:
        while self._deferred and self._deferred[0][0] <= now:
            _, _, dest, tag, data, stamp = heapq.heappop(self._deferred)
            self._inflight.append((self.comm.Isend(data, dest, tag),
                                   self._stamps.Isend(stamp, dest, tag), data, stamp))

    def flush(self) -> None:
        """Post every deferred send, waiting (sleep, then spin) until each is due."""
        while self._deferred:
            gap = self._deferred[0][0] - time.perf_counter()
            if gap > _SPIN_MARGIN_S:
                time.sleep(gap - _SPIN_MARGIN_S)
            elif gap > 0:
                os.sched_yield()
            self._post_due(time.perf_counter())

    def _settle(self) -> None:
        """After a collective every earlier message was received: complete the sends."""
        if self._inflight:
            self._mpi.Request.Waitall([r for f in self._inflight for r in f[:2]])
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

    def abort(self, code: int = 1) -> None:
        self.inner.abort(code)

    def __getattr__(self, name):
        """Anything else of the inner transport (e.g. a newer collective helper); a method
        first sends the deferred messages out, as the collectives above do."""
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def flushed(*args, **kwargs):
            self.flush()
            return attr(*args, **kwargs)

        return flushed

    def virtual_time_s(self) -> float | None:
        """Max of the logical clocks over ranks, in seconds, on rank 0 (None elsewhere).
        Collective; leaves every clock unchanged (logging takes no virtual time)."""
        self.flush()
        top = self.comm.reduce(self.clock_us, op=self._mpi.MAX, root=0)
        return None if top is None else top / 1e6


class TimedProblem:
    """The problem as the algorithm sees it: each ``gradient`` call (one local step) adds
    its compute time to the layer's clock: ``compute_time_us`` when given, else the CPU
    time of the calling thread spent in it (so time a rank spends descheduled on an
    oversubscribed host is not counted; for work off the CPU, e.g. a GPU, or multithreaded
    gradients, give --compute-time)."""

    def __init__(self, problem, layer: LatencyTransport, compute_time_us: float | None):
        self._problem, self._layer, self._fixed = problem, layer, compute_time_us

    def __getattr__(self, name):
        return getattr(self._problem, name)

    def gradient(self, *args, **kwargs):
        if self._fixed is not None:
            self._layer.clock_us += self._fixed
            return self._problem.gradient(*args, **kwargs)
        start = time.thread_time()  # CPU time: a descheduled rank does not count as computing
        out = self._problem.gradient(*args, **kwargs)
        self._layer.clock_us += (time.thread_time() - start) * 1e6
        return out


def warn_oversubscribed(layer: "LatencyTransport") -> None:
    """Real delays are not faithful when ranks exceed cores: say so once (rank 0)."""
    if layer.real and layer._oversubscribed and layer.rank == 0:
        print(f"warning: --clock real with {layer.size} ranks on {os.cpu_count()} cores: real "
              f"delays are not faithful when ranks exceed cores; use --clock virtual",
              file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- simulator
from .virtual_clock import Oracle  # noqa: E402,F401  (the simulator's clocks)


# --------------------------------------------------------------------------- probe
def probe(argv=None) -> int:
    """Real-clock micro-benchmark, run under mpirun: rank 0 exchanges one message with
    every other rank (each posts right after a barrier). Prints per repetition every
    rank's exchange time (until all its receives completed and all its sends went out)
    and each message's visibility delay (receive time minus the post time carried in the
    message; one host, one monotonic clock).

        mpirun -n 3 python -m mpi_teleport.latency probe --latency matrix:d.csv --reps 50
    """
    import argparse
    import json

    from mpi4py import MPI

    from .transport import KIND_Y, Transport

    parser = argparse.ArgumentParser(prog="python -m mpi_teleport.latency probe")
    parser.add_argument("--latency", required=True)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--dim", type=int, default=50)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        model = parse_spec(args.latency, size)
    except UsageError as exc:
        if rank == 0:
            print(f"probe: error: {exc}", file=sys.stderr)
        return 2
    tr = LatencyTransport(Transport(comm), model, "real")
    peers = range(1, size) if rank == 0 else [0]
    inbox = {p: np.zeros(args.dim) for p in peers}
    out = np.zeros(args.dim)
    for rep in range(args.reps):
        tag = tr.tag(rep, KIND_Y)
        tr.barrier()
        pendings = {p: tr.post_recvs([(p, tag, inbox[p])]) for p in peers}
        start = time.perf_counter()
        out[0] = start
        sends = tr.post_sends([(p, tag, out) for p in peers])
        seen = {}
        for p in sorted(peers, key=lambda p: model.delay_us(p, rank, out.nbytes)):
            tr.wait(pendings[p])
            seen[p] = time.perf_counter()
        tr.wait(sends)
        tr.flush()  # the exchange is over when its last send has gone out too
        done = time.perf_counter()
        rows = comm.gather({"rank": rank, "exchange_s": done - start,
                            "visible_s": {p: seen[p] - inbox[p][0] for p in peers}}, root=0)
        if rank == 0:
            print(json.dumps({"rep": rep, "ranks": rows}), flush=True)
    tr.barrier()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["probe"]:
        print(__doc__)
        sys.exit(2)
    sys.exit(probe(sys.argv[2:]))
