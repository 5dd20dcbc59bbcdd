"""Output files shared by the simulator and the MPI runtime (mpi_teleport/DESIGN.md §10.2).

``config.json``, ``metrics.jsonl`` and ``summary.json`` are always replaced atomically
(write a temporary file in the same directory, then rename), so a reader never sees a
half-written file, even while a long run is still going.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return value


def dumps(obj, **kw) -> str:
    # repr-exact floats: json writes the shortest repr that round-trips, so values
    # compare with == after reading back.
    return json.dumps(_jsonable(obj), **kw)


def write_atomic(path: Path, text: str) -> None:
    write_atomic_with(path, lambda f: f.write(text.encode()))


def write_atomic_with(path: Path, write) -> None:
    """``write(binary file)`` into a temporary file beside ``path``, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, dumps(obj, indent=2, sort_keys=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class RunFiles:
    """The three files of one run in ``out``; ``out=None`` writes nothing."""

    def __init__(self, out: Path | None, flush_seconds: float = 2.0, writes: bool = True):
        self.out = Path(out) if out is not None else None
        # An elastic run's other processes know ``out`` without writing there, so that
        # the lowest survivor can take over when the writer dies (:meth:`take_over`).
        self.writes = writes
        self.records: list[dict] = []
        self._lines: list[str] = []
        self._flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)

    def config(self, cfg: dict) -> None:
        if self.out is not None and self.writes:
            write_json(self.out / "config.json", cfg)

    def metric(self, record: dict) -> None:
        self.records.append(record)
        self._lines.append(dumps(record))
        if (self.out is not None and self.writes
                and time.monotonic() - self._last_flush > self._flush_seconds):
            self.flush()

    def restore(self, records: list[dict]) -> None:
        """Start from the records of an interrupted run (resume): rewrite metrics.jsonl."""
        self.records = list(records)
        self._lines = [dumps(r) for r in self.records]
        self.flush()

    def take_over(self, writer: bool) -> None:
        """Elastic: this process writes from now on when ``writer`` (the files are
        rewritten whole from the records it kept)."""
        if writer and not self.writes:
            self.writes = True
            self.flush()

    def forget(self, r: int) -> None:
        """Drop the records of rounds >= r (elastic: round r is recorded again)."""
        while self.records and self.records[-1].get("round", -1) >= r:
            self.records.pop()
            self._lines.pop()

    def flush(self) -> None:
        if self.out is not None and self.writes:
            write_atomic(self.out / "metrics.jsonl", "".join(line + "\n" for line in self._lines))
            self._last_flush = time.monotonic()

    def summary(self, summary: dict) -> None:
        self.flush()
        if self.out is not None and self.writes:
            write_json(self.out / "summary.json", summary)
