"""The watch for a signal between logging rounds (mpi_teleport/runtime/stop_watch.py), its
ranks played in one process over a fake reduction: every rank stops at the same boundary,
whatever its own clock says, within two agreed periods of the signal; the period is the
smallest proposal; the reduction in flight is completed by close(). The MPI runs are in
test_failures.py and test_launch.py."""
from __future__ import annotations

import pytest

from mpi_teleport.runtime.stop_watch import MAX_PERIOD, StopWatch


class Reductions:
    """Non-blocking elementwise MAX over `ranks` callers, started in the same order on
    each (as MPI's collectives on one communicator)."""

    def __init__(self, ranks: int):
        self.started: list[list] = [[] for _ in range(ranks)]

    def start_for(self, rank: int):
        def start(values):
            index = len(self.started[rank])
            self.started[rank].append(list(values))
            return Handle(self, index)
        return start


class Handle:
    def __init__(self, reductions: Reductions, index: int):
        self.reductions, self.index = reductions, index

    def wait(self) -> list[int]:
        rows = [started[self.index] for started in self.reductions.started]  # (all began)
        return [max(column) for column in zip(*rows)]


class Clock:
    def __init__(self, round_s: float):
        self.now, self.round_s = 0.0, round_s

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("signalled", [[2], [0, 1, 2, 3]], ids=["one rank", "every rank"])
def test_every_rank_stops_at_the_same_boundary_within_two_periods(signalled):
    ranks, arrives = 4, 30000
    reductions = Reductions(ranks)
    clocks = [Clock(1e-5 * (1 + r)) for r in range(ranks)]  # (the ranks' rounds differ)
    watches = [StopWatch(reductions.start_for(r), clock=clocks[r]) for r in range(ranks)]
    stopped: dict[int, int] = {}
    boundary = 0
    while len(stopped) < ranks and boundary < 10 * arrives:
        boundary += 1
        for r in range(ranks):
            if r in stopped:
                continue
            clocks[r].now += clocks[r].round_s
            flag = 15 if (r in signalled and boundary >= arrives) else 0
            if watches[r].boundary(flag):
                stopped[r] = boundary
    assert len(set(stopped.values())) == 1, stopped
    periods = {w.period for w in watches}
    assert len(periods) == 1  # agreed: the same schedule on every rank
    period = periods.pop()
    assert period == int(0.25 / 4e-5)  # (the slowest rank's rounds: the smallest proposal)
    assert 0 < stopped[0] - arrives <= 2 * period + 1


def test_a_watch_proposes_a_quarter_second_and_closes_what_is_in_flight():
    reductions = Reductions(1)
    clock = Clock(0.1)
    watch = StopWatch(reductions.start_for(0), clock=clock)
    assert watch.proposal(0.1) == 2 and watch.proposal(1.0) == 1
    assert watch.proposal(0.0) == MAX_PERIOD and watch.proposal(1e-12) == MAX_PERIOD
    clock.now += 0.1
    assert watch.boundary(0) == 0 and watch._pending is not None
    watch.close()
    assert watch._pending is None
    watch.close()  # (nothing in flight: nothing to do)
