"""What many test files share: the repository's root, and run records without their
wall-clock fields (two runs of the same numbers differ only there).

The tests directory is on sys.path (tests/conftest.py puts it there, also for the tests
that run inside MPI ranks), so test files say ``from helpers import ...``.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WALL_CLOCK = ("time_s",)  # the one field of a metrics record that is measured, not computed


def without_time(records) -> list[dict]:
    """Metrics records (dicts, e.g. read_jsonl of metrics.jsonl) minus their wall-clock
    fields: what must be equal, bit for bit, between back ends and between runs."""
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in records]
