"""Watching for a signal between logging rounds, at a cost each round does not notice.

The ranks agree on a signal at every logging and checkpoint round, where a collective
happens anyway (:class:`mpi_teleport.checkpoint.Keeper`). With a large ``--log-every``
those rounds may be minutes apart, longer than a scheduler waits between SIGTERM and
SIGKILL (SLURM's KillWait: 30 s by default). In between, :class:`StopWatch` keeps one
non-blocking reduction in flight: at a *watch* boundary every rank completes the
reduction started at the previous watch (long finished: every rank joined it a period
ago, and the round's own messages progressed it) and starts the next one with its own
signal flag. A signal is therefore seen at the second watch after it arrived, on every
rank at the same boundary: the stop round is the same everywhere, whatever the clocks.

The watch period, in rounds, aims at :data:`TARGET_S` of wall time: each rank proposes
one from its own rounds' duration, the reduction carries the proposals with the flag
(the smallest wins), and the period it returns is the next one on every rank, so the
schedule stays identical across ranks. A stop thus comes within about two periods (half
a second), or two rounds where a round is longer than a period, then the final
checkpoint's write. The cost: one 16-byte non-blocking Allreduce started and completed
per period (a few microseconds, once every quarter second) and a counter per round
(benchmarks/bench_stop_watch.py measures it).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

TARGET_S = 0.25  # wall time between two watches
MAX_PERIOD = 1 << 20  # rounds (a bound for rounds of a microsecond)


class StopWatch:
    """Every rank calls :meth:`boundary` at the same boundaries (the rounds between
    logging rounds) with its signal flag; it returns the signal every rank agreed to stop
    for there, or 0. ``start(values)``: a non-blocking elementwise MAX over the ranks of
    a few integers, returning a handle whose ``wait()`` gives the result."""

    def __init__(self, start: Callable[[Sequence[int]], Any],
                 clock: Callable[[], float] = time.perf_counter, target_s: float = TARGET_S):
        self._start, self._clock, self._target = start, clock, target_s
        self._pending: Any = None  # the reduction in flight
        self.period = 1  # boundaries from one watch to the next (agreed)
        self._count = 0  # boundaries since the last watch
        self._since = clock()

    def boundary(self, flag: int) -> int:
        self._count += 1
        if self._count < self.period:
            return 0
        now = self._clock()
        per_round = (now - self._since) / self._count
        self._count, self._since = 0, now
        if self._pending is not None:
            signum, fewest = self._pending.wait()
            self._pending = None
            if signum:
                return int(signum)
            self.period = int(-fewest)  # (the smallest proposal: MAX of the negatives)
        self._pending = self._start([int(flag), -self.proposal(per_round)])
        return 0

    def proposal(self, per_round: float) -> int:
        """This rank's period: the rounds that take about ``target_s``."""
        if per_round <= 0:
            return MAX_PERIOD
        return max(1, min(MAX_PERIOD, int(self._target / per_round)))

    def close(self) -> None:
        """Complete the reduction in flight (every rank, at the same point: the run's end
        or an agreed stop), so that no request outlives the run."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.wait()


def watch_for(backend, terminator) -> StopWatch | None:
    """The run's watch: where a signal can be caught (a terminator), the back end agrees
    only at logging rounds (not every round, as one process does), and its transport
    has a non-blocking reduction. Elastic runs agree at their own boundaries."""
    if terminator is None or backend.checks_every_round or backend.elastic:
        return None
    start = getattr(backend, "agree_start", None)
    return StopWatch(start) if start is not None else None
