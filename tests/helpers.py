"""What many test files share: the repository's root, and run records without their
wall-clock fields (two runs of the same numbers differ only there), and ranks as threads
with the one collective the start-up agreement uses (an allgather).

The tests directory is on sys.path (tests/conftest.py puts it there, also for the tests
that run inside MPI ranks), so test files say ``from helpers import ...``.
"""
from __future__ import annotations

import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WALL_CLOCK = ("time_s",)  # the one field of a metrics record that is measured, not computed


def without_time(records) -> list[dict]:
    """Metrics records (dicts, e.g. read_jsonl of metrics.jsonl) minus their wall-clock
    fields: what must be equal, bit for bit, between back ends and between runs."""
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in records]


class ThreadAllgather:
    """n ranks as threads with an allgather among them: ``rank(r)`` is rank r's transport
    (``rank``, ``size``, ``allgather``), enough for runner.hold_agreed and the agreement
    on a refusal, without MPI."""

    def __init__(self, n: int):
        self.n, self.slots, self.barrier = n, [None] * n, threading.Barrier(n, timeout=30)

    def rank(self, r: int):
        hub = self

        class Transport:
            rank, size = r, hub.n

            def allgather(self, value):
                hub.slots[r] = value
                hub.barrier.wait()
                out = list(hub.slots)
                hub.barrier.wait()  # (nobody overwrites a slot before every rank has read)
                return out

        return Transport()
