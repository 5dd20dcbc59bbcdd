"""A one-line progress bar on stderr for long runs (rank 0 only)."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, enabled: bool, total: int = 1, stream=None):
        self.total = max(1, total)
        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self._last = 0.0
        self.headline = ""  # the latest evaluation's metric, shown beside the training loss

    def update(self, done: int, info: str = "", force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        frac = min(1.0, done / self.total)
        bar = "#" * int(frac * 24)
        elapsed = now - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        self.stream.write(
            f"\r{self.label:<22} [{bar:<24}] {100 * frac:5.1f}% round {done}/{self.total}"
            f" {info}{' | ' if info and self.headline else ''}{self.headline} {elapsed:6.1f}s"
            f" eta {eta:5.1f}s "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
