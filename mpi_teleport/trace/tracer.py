"""One process's part of a run's trace: its spans, its clock's alignment, and the writes.

The engine makes a :class:`Tracer` at the start of a run when a trace is asked for
(:func:`start`), hands it to the back end (``Backend.trace``: the back end records the
parts of its rounds) and records the round boundaries itself (logging, checkpoints,
elastic agreement). Every process writes its spans to a part file beside the trace
(``PATH.parts/rank-NNNNN.npy``, non-collective) at every checkpoint and at the end; after
a barrier the root merges the parts into the one Chrome trace file (:mod:`.chrome`), so a
job stopped by a signal, or killed after a checkpoint, keeps the trace up to there. The
final write removes the parts.

Clocks: every process reads ``time.perf_counter`` (on Linux the host's monotonic clock,
one clock for every process of a host). At the start the processes pass a barrier and
each takes the time it left it; the root's is broadcast, and each process's offset against
it goes into the file. An offset under :data:`SAME_CLOCK_S` is the barrier's own skew on
one clock (the monotonic clocks of two hosts differ by the time between their boots), so
such a process takes the root's zero: exact. A process on another host takes the moment it
left the barrier as its zero (aligned to the barrier's skew, microseconds on a cluster's
network). A hot spare that joins later takes the root's zero from the hand-over (exact on
the root's host).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ..disk.memory import memory_bytes
from ..errors import UsageError
from . import spans as sp

TRACE_ENV = "MPI_TELEPORT_TRACE"  # a trace of every run of this process, to this path
ROUNDS_ENV = "MPI_TELEPORT_TRACE_ROUNDS"  # rounds recorded at most (default ROUNDS)
EVERY_ENV = "MPI_TELEPORT_TRACE_EVERY"  # one round in this many recorded (default 1)
CPU_ENV = "MPI_TELEPORT_TRACE_CPU"  # 1: each span's CPU time too (thread_time)
ROUNDS = 1000
SAME_CLOCK_S = 0.5  # offsets below this: one host's clock (see above)
_written: set = set()  # trace files written by runs of this process (see start())


def _count_from_env(name: str, default: int, environ=None) -> int:
    text = (os.environ if environ is None else environ).get(name, "").strip()
    try:
        value = int(text) if text else default
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{name}={text!r}: give a whole number >= 1")
    return value


def limits_from_env(environ=None) -> tuple[int, int]:
    """(rounds recorded at most, one round in ``every``): ``MPI_TELEPORT_TRACE_ROUNDS``
    (default 1000) and ``MPI_TELEPORT_TRACE_EVERY`` (default 1)."""
    return (_count_from_env(ROUNDS_ENV, ROUNDS, environ), _count_from_env(EVERY_ENV, 1, environ))


def cpu_from_env(environ=None) -> bool:
    """``MPI_TELEPORT_TRACE_CPU``: 1 records each span's CPU time too (0 or unset: not)."""
    text = (os.environ if environ is None else environ).get(CPU_ENV, "").strip()
    if text not in ("", "0", "1"):
        raise UsageError(f"{CPU_ENV}={text!r}: give 1 (record each span's CPU time) or 0")
    return text == "1"


def path_from_env(environ=None) -> Path | None:
    """``MPI_TELEPORT_TRACE``: a trace file for every run of this process (None: unset)."""
    text = (os.environ if environ is None else environ).get(TRACE_ENV, "").strip()
    return Path(text) if text else None


def parts_dir(path: Path) -> Path:
    """Where the processes' part files of trace ``path`` go."""
    path = Path(path)
    return path.with_name(path.name + ".parts")


class Tracer:
    """This process's trace of one run: ``spans`` (a :class:`~.spans.Spans`), where it
    goes (``path``), what the process is (``rank``; ``pid_from``: "rank" for an MPI
    rank, "node" for the simulator, whose spans name their simulated node) and its
    clock's zero and offset against the root's."""

    def __init__(self, path: Path, spans: sp.Spans, *, backend_name: str = "",
                 total_rounds: int = 0):
        self.path, self.spans = Path(path), spans
        self.rank = 0
        self.pid_from = "rank"
        self.clock = "real"  # or "virtual": the simulator's logical clocks
        self.zero = 0.0
        self.offset = 0.0
        self.aligned = False
        self.backend_name = backend_name
        self.total_rounds = int(total_rounds)
        self.started = time.time()
        self.joined: int | None = None  # a hot spare: the round it took its node over at

    # -- the round boundaries (the engine's spans) ------------------------------------------
    def boundary(self, r: int) -> sp.Spans | None:
        """The span buffer set to boundary r, or None where boundaries are not recorded
        (the simulator under the virtual clock: its spans are the nodes' logical time)."""
        return None if self.clock == "virtual" else self.spans.boundary(r)

    # -- clocks ---------------------------------------------------------------------------
    def align(self, backend) -> None:
        """Collective: every process's zero is the moment it leaves one barrier; the
        root's is shared, each process's offset against it recorded."""
        if self.clock == "virtual":
            self.aligned = True
            return
        backend.barrier()
        self.zero = time.perf_counter()
        root_zero = float(backend.share(lambda: self.zero))
        self.offset = self.zero - root_zero
        if abs(self.offset) < SAME_CLOCK_S:  # (the root's clock: its zero is exact)
            self.zero = root_zero
        self.aligned = True

    def take_zero(self, root_zero: float | None) -> None:
        """A hot spare: the root's zero, from the hand-over (its clock is the root's on
        the root's host)."""
        if root_zero is not None:
            self.offset = 0.0
            self.zero = float(root_zero)
            self.aligned = True

    # -- writing ----------------------------------------------------------------------------
    def meta(self) -> dict:
        s = self.spans
        return {"rank": self.rank, "pid_from": self.pid_from, "clock": self.clock,
                "zero": self.zero, "offset_s": self.offset, "aligned": self.aligned,
                "dropped": s.dropped, "rounds": s.rounds, "every": s.every, "first": s.first,
                "backend": self.backend_name, "total_rounds": self.total_rounds,
                "started": self.started}

    def write_part(self) -> Path:
        """This process's spans so far into its part file (atomically; non-collective)."""
        from ..disk.output import write_atomic, write_atomic_with

        directory = parts_dir(self.path)
        # (a spare that took over a dead rank's place keeps that rank's part beside its own)
        joined = "" if self.joined is None else f"-joined-{self.joined}"
        stem = directory / f"rank-{self.rank:05d}{joined}"
        write_atomic_with(stem.with_suffix(".npy"),
                          lambda f: np.save(f, self.spans.recorded(), allow_pickle=False))
        write_atomic(stem.with_suffix(".json"), json.dumps(self.meta()))
        self.spans.flushed = self.spans.n
        return stem

    def flush(self, backend, final: bool = False) -> None:
        """Collective: every process writes its part; after a barrier the root merges the
        parts into the trace file (``final``: and removes them)."""
        start = time.perf_counter()
        self.write_part()
        backend.barrier()
        if backend.root:
            from .chrome import write_trace

            write_trace(self.path, read_parts(self.path))
            if final:
                shutil.rmtree(parts_dir(self.path), ignore_errors=True)
        if not final and self.clock == "real":
            self.spans.boundary(self.spans.round).add(sp.FLUSH, start, time.perf_counter())


def read_parts(path: Path) -> list[tuple[dict, np.ndarray]]:
    """Every process's (meta, spans) of trace ``path``, by rank."""
    directory = parts_dir(path)
    out = []
    for meta_file in sorted(directory.glob("rank-*.json")):
        try:
            meta = json.loads(meta_file.read_text())
            spans = np.load(meta_file.with_suffix(".npy"), allow_pickle=False)
        except (OSError, ValueError):
            continue  # (a part being replaced this moment, or lost: the others stand)
        out.append((meta, spans))
    return out


def run_path(path: Path, algorithm: str) -> Path:
    """Where this run's trace goes: ``path``, unless a run of this process wrote it
    already (a command that runs two algorithms): then ``path`` with the algorithm's name
    before its suffix (``trace.json``, ``trace-dsgd.json``)."""
    key = str(Path(path).resolve())
    if key in _written:
        path = path.with_name(f"{path.stem}-{algorithm}{path.suffix}")
    _written.add(str(Path(path).resolve()))
    return path


def start(path, backend, total_rounds: int, first: int = 0, joining: bool = False,
          environ=None, algorithm: str = "run", outputs=((), ())) -> Tracer:
    """The tracer of a run on ``backend`` (collective unless ``joining``: the clocks are
    aligned here). Its limits come from ``MPI_TELEPORT_TRACE_ROUNDS`` and
    ``MPI_TELEPORT_TRACE_EVERY``; ``outputs``: (the run's own files, its checkpoint
    directories), which the trace may not overwrite (the root's are checked)."""
    rounds, every = limits_from_env(environ)
    cpu = cpu_from_env(environ)
    path = run_path(Path(path), algorithm)
    if not joining:
        # (collective: a buffer beyond the memory, one of the run's own files, a place the
        # trace cannot go: every rank's one-line refusal now, not an error after the run)
        def ready() -> None:
            check_buffer(rounds, every, total_rounds - first)
            check_not_an_output(path, *outputs)
            prepare_dir(path)

        backend.share(ready)
    spans = sp.make_spans(rounds, every, total_rounds - first, first=first, cpu=cpu)
    tracer = Tracer(path, spans, backend_name=backend.name, total_rounds=total_rounds)
    backend.trace(tracer)
    if joining:
        tracer.joined = first
    else:
        tracer.align(backend)
    return tracer


ROW_BYTES = 200  # one recorded span in the buffer: its slot, its tuple and its floats


def check_buffer(rounds: int, every: int, total_rounds: int, available=None) -> None:
    """UsageError when the span buffer for ``rounds`` recorded rounds (no more than the
    run samples) cannot fit in this machine's memory, as every other setting is checked
    (:func:`mpi_teleport.session.preflight.check_fits`)."""
    available = memory_bytes() if available is None else available
    need = sp.capacity_for(rounds, every, total_rounds) * ROW_BYTES
    if available is not None and need > available:
        recorded = sp.sampled_rounds(rounds, every, total_rounds)
        raise UsageError(f"{ROUNDS_ENV}={rounds}: the trace's buffer for {recorded} rounds needs "
                         f"about {need / 2**30:.3g} GiB, more than the {available / 2**30:.3g} "
                         f"GiB of memory here; give fewer rounds ({ROUNDS_ENV}) or record one "
                         f"in several ({EVERY_ENV})")


def check_not_an_output(path: Path, files=(), directories=()) -> None:
    """UsageError when trace ``path`` is one of the run's own ``files`` (config.json,
    metrics.jsonl, ...) or lies in one of its ``directories`` (its checkpoints)."""
    from ..disk.paths import show

    target = Path(path).resolve()
    if any(target == Path(f).resolve() for f in files):
        raise UsageError(f"trace {show(path)}: that is one of the run's own files; give the "
                         f"trace a path of its own (e.g. {show(target.parent / 'trace.json')})")
    for directory in directories:
        if Path(directory).resolve() in (target, *target.parents):
            raise UsageError(f"trace {show(path)}: that is inside the run's checkpoint "
                             f"directory {show(directory)}; give the trace a path outside it")


def prepare_dir(path: Path) -> None:
    """Where trace ``path`` goes, made ready at the start (rank 0): a killed job's parts
    there removed (this run's replace them), the parts' directory made; a UsageError
    when it cannot be written."""
    directory = parts_dir(path)
    try:
        if Path(path).is_dir():
            raise IsADirectoryError(21, "it is a directory")
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".writable"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"trace {path}: cannot write there ({exc.strerror or exc}); give a "
                         f"path in a writable directory") from None
