"""A one-line progress bar on stderr for long runs (rank 0 only).

While the bar is shown, what the script prints (``print``, ``sys.stderr.write``, and
``logging`` handlers writing to either stream) goes above it: the bar's line is cleared,
the text written, and the bar drawn again below it, as tqdm's ``write`` does. The metric
shown is marked with the round it was measured at, and as stale once rounds have run since
(an evaluation may be an epoch old), and the ETA appears only once enough rounds have run
for it to mean something. Where the stream is not a terminal (a log file, a pipe) the bar
is a plain line at most every :data:`NOT_A_TERMINAL_S` seconds, never a carriage return."""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

# The ETA is shown once this share of the rounds has run and this many seconds passed.
ETA_AFTER_SHARE, ETA_AFTER_S = 0.02, 2.0
NOT_A_TERMINAL_S = 10.0  # a line at most this often where the stream is not a terminal


def shows(value) -> bool:
    """Whether a run's ``progress`` setting shows the bar: the API's True, the command
    lines' ``on``, or ``auto`` where stderr is a terminal (a log file gets none)."""
    return value is True or value == "on" or (value == "auto" and is_terminal(sys.stderr))


def is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (where a bar redrawn in place belongs)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # (no isatty; a closed stream)
        return False


class _AboveBar:
    """A text stream that writes above the bar: its line cleared first, drawn again after a
    line ends. Everything else is the wrapped stream's."""

    def __init__(self, stream, bar: "Progress"):
        self._stream, self._bar = stream, bar

    def write(self, text: str) -> int:
        bar = self._bar
        if not text or not bar.drawn:
            return self._stream.write(text)
        if not bar.hidden:  # (a line's first piece: the bar's line cleared for it)
            bar.clear()
            bar.hidden = True
        written = self._stream.write(text)
        self._stream.flush()
        if text.endswith("\n"):  # (the line ended: the bar below it again)
            bar.hidden = False
            bar.redraw()
        return written

    def __getattr__(self, name):
        return getattr(self._stream, name)


class Progress:
    _attached: list = []  # bars whose stream wrappers are in place

    def __init__(self, label: str, enabled: bool, total: int = 1, stream=None,
                 terminal: bool | None = None):
        self.total = max(1, total)
        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        # (not a terminal: a plain line now and then, nothing drawn in place)
        self.terminal = is_terminal(self.stream) if terminal is None else terminal
        self.start = time.monotonic()
        self._last = 0.0
        self.headline = ""  # the latest evaluation's metric, shown beside the training loss
        self.headline_round: int | None = None  # the round it was measured at
        self.drawn = ""  # the bar's text as last written ("" when not on screen)
        self.hidden = False  # cleared for a line the script is writing above it
        self._saved: dict | None = None  # the streams replaced while the bar is shown

    def update(self, done: int, info: str = "", force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.terminal else NOT_A_TERMINAL_S):
            return
        self._last = now
        frac = min(1.0, done / self.total)
        bar = "#" * int(frac * 24)
        elapsed = now - self.start
        if frac > 0 and frac >= ETA_AFTER_SHARE and elapsed >= ETA_AFTER_S:
            eta = f"eta {elapsed / frac - elapsed:5.1f}s"
        else:
            eta = "eta   --  "  # (too early to mean anything)
        headline = self.headline
        r = self.headline_round
        if headline and r is not None:  # (its round; stale once the run has moved on)
            headline += f" @{r}" + (f" (stale: {done - r} rounds old)" if done > r else "")
        line = (f"{self.label:<22} [{bar:<24}] {100 * frac:5.1f}% round {done}/{self.total}"
                f" {info}{' | ' if info and headline else ''}{headline}"
                f" {elapsed:6.1f}s {eta} ")
        if not self.terminal:
            self._raw(line.rstrip() + "\n")
            return
        self.drawn = line
        self._attach()
        self._raw(f"\r{self.drawn}")

    def _raw(self, text: str) -> None:
        out = self._saved["stream"] if self._saved else self.stream
        out.write(text)
        out.flush()

    def clear(self) -> None:
        """Blank the bar's line (before text is written above it)."""
        if self.drawn:
            self._raw("\r" + " " * len(self.drawn) + "\r")

    def redraw(self) -> None:
        if self.drawn:
            self._raw(f"\r{self.drawn}")

    def _attach(self) -> None:
        """Route the script's output above the bar (once, while it is shown)."""
        if self._saved is not None:
            return
        saved: dict[str, Any] = {"stream": self.stream, "stdout": sys.stdout,
                                 "stderr": sys.stderr, "handlers": []}
        wrap = {id(sys.stdout): _AboveBar(sys.stdout, self),
                id(sys.stderr): _AboveBar(sys.stderr, self)}
        if id(self.stream) not in wrap:
            wrap[id(self.stream)] = _AboveBar(self.stream, self)
        for handler in logging.root.handlers:
            if isinstance(handler, logging.StreamHandler) and id(handler.stream) in wrap:
                saved["handlers"].append((handler, handler.stream))
                handler.stream = wrap[id(handler.stream)]
        sys.stdout, sys.stderr = wrap[id(sys.stdout)], wrap[id(sys.stderr)]
        self._saved = saved
        Progress._attached.append(self)

    def _detach(self) -> None:
        saved, self._saved = self._saved, None
        if saved is None:
            return
        sys.stdout, sys.stderr = saved["stdout"], saved["stderr"]
        for handler, stream in saved["handlers"]:
            handler.stream = stream
        if self in Progress._attached:
            Progress._attached.remove(self)

    @classmethod
    def release_all(cls) -> None:
        """Put back every stream a bar replaced (a run that ended in an exception)."""
        for bar in list(cls._attached):
            bar.drawn = ""
            bar._detach()

    def close(self) -> None:
        if self.enabled and self.terminal:
            out = self._saved["stream"] if self._saved else self.stream
            self._detach()
            self.drawn = ""
            out.write("\n")
            out.flush()
