"""Output files shared by the simulator and the MPI runtime (mpi_teleport/DESIGN.md §10.2).

``config.json``, ``metrics.jsonl`` and ``summary.json`` are always replaced atomically
(write a temporary file in the same directory, then rename), so a reader never sees a
half-written file, even while a long run is still going. A write that fails (a full
disk) raises :class:`~mpi_teleport.errors.OutputError`, one line naming the file, and
leaves the previous version of the file in place. ``config.json`` is written when the
run's first record is (its inputs, a resumed checkpoint included, have then been read
successfully), so a run refused at start-up rewrites nothing.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path

from ..errors import OutputError


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


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it
    (/proc/self/status, since 4.7); elsewhere set and put back at once."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    write_atomic_with(path, lambda f: f.write(text.encode()))


def write_atomic_with(path: Path, write) -> None:
    """``write(binary file)`` into a temporary file beside ``path``, fsync, rename. An
    OSError (a full disk) becomes :class:`OutputError`; ``path`` keeps its old content."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp makes the file 0600 whatever the umask; the renamed file is read
            # as any other program's output is (0644 under umask 022)
            os.fchmod(f.fileno(), 0o666 & ~current_umask())
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(path, exc) from None
        raise


def write_json(path: Path, obj) -> None:
    write_atomic(path, dumps(obj, indent=2, sort_keys=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


RUN_FILES = ("config.json", "metrics.jsonl", "summary.json")  # what a run writes in ``out``


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
        self._config: dict | None = None  # config.json's content until the first record is written
        if self.out is not None:
            try:
                self.out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OutputError(self.out, exc) from None

    def config(self, cfg: dict) -> None:
        """config.json, written with the first record (see the module's docstring)."""
        if self.out is not None:
            self._config = cfg

    def _write_config(self) -> None:
        # (a config is kept only with an output directory: config())
        if self._config is not None and self.writes and self.out is not None:
            write_json(self.out / "config.json", self._config)
            self._config = None

    def metric(self, record: dict) -> None:
        self._write_config()
        self.records.append(record)
        self._lines.append(dumps(record))
        if (self.out is not None and self.writes
                and time.monotonic() - self._last_flush > self._flush_seconds):
            self.flush()

    def restore(self, records: list[dict]) -> None:
        """Start from the records of an interrupted run (resume): rewrite metrics.jsonl."""
        self._write_config()
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
            self._write_config()
            write_atomic(self.out / "metrics.jsonl", "".join(line + "\n" for line in self._lines))
            self._last_flush = time.monotonic()

    def summary(self, summary: dict) -> None:
        self._write_config()
        self.flush()
        if self.out is not None and self.writes:
            write_json(self.out / "summary.json", summary)
