"""The API's options grouped by concern: small frozen dataclasses a call can take instead
of the flat keywords (``checkpoints=Checkpoints(every=50)`` or ``checkpoint_every=50``).

They hold values only; they are checked where the flat keywords are, by the one
validator (:mod:`mpi_teleport.front.settings`), and a bad value reads the same either way
(``log_every must be at least 1, got 0`` for ``Records(every=0)``). A call that sets one
setting both ways is refused in one line (:func:`merge`): there is no silent precedence.

The flat keywords' defaults are :class:`Default` values: they print as the plain default
(``help(mt.teleportation)`` shows ``log_every: int = 10``) but tell "not given" apart from
the same value given on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from ..errors import UsageError

__all__ = ["Checkpoints", "Latency", "Records"]


@dataclass(frozen=True)
class Checkpoints:
    """Periodic checkpoints and resuming (flat keywords: ``checkpoint_every``,
    ``checkpoint_dir``, ``keep_checkpoints``, ``resume``).

    ``every``: write one every this many rounds (0: none; a signal still writes one);
    ``dir``: where (default ``out/checkpoints``); ``keep``: how many to keep;
    ``resume``: a run, checkpoint or round-* directory to continue from."""

    every: int = 0
    dir: str | Path | None = None
    keep: int = 2
    resume: str | Path | None = None


@dataclass(frozen=True)
class Latency:
    """The latency layer (flat keywords: ``latency``, ``clock``, ``compute_time``).

    ``model``: ``none``, ``const:US``, ``mod:TAU``, ``matrix:FILE.csv``, optionally
    ``,bw:GBPS``; ``clock``: ``real`` or ``virtual``; ``compute_time``: the modelled
    compute time per step in microseconds."""

    model: str = "none"
    clock: str = "real"
    compute_time: float | None = None


@dataclass(frozen=True)
class Records:
    """What is recorded and when (flat keywords: ``log_every``, ``target``,
    ``stop_at_target``, ``progress``, ``callback``).

    ``every``: evaluate every this many rounds (and the first and last); ``target`` and
    ``stop_at_target``: the metric value that counts as reached and whether to stop
    there; ``progress``: a progress bar on stderr; ``callback(record)``: called with each
    record, a true return value stops the run; ``eval_every``: evaluate the model only
    every this many rounds (and the first and last; None: at every record), the other
    records carrying the training loss alone."""

    every: int = 10
    target: float | None = None
    stop_at_target: bool = False
    progress: bool = False
    callback: Callable[[dict], object] | None = None
    eval_every: int | None = None


# The flat keyword of each field, in the spelling messages use (settings.RULES' names).
FLAT = {
    Checkpoints: {"every": "checkpoint_every", "dir": "checkpoint_dir",
                  "keep": "keep_checkpoints", "resume": "resume"},
    Latency: {"model": "latency", "clock": "clock", "compute_time": "compute_time"},
    Records: {"every": "log_every", "target": "target", "stop_at_target": "stop_at_target",
              "progress": "progress", "callback": "callback", "eval_every": "eval_every"},
}
KEYWORD = {Checkpoints: "checkpoints", Latency: "latency", Records: "records"}


class Default:
    """A keyword's default value, told apart from the same value given explicitly."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def value(given):
    """``given``, or the default it stands for."""
    return given.value if isinstance(given, Default) else given


def merge(cls, obj, **flat):
    """One ``cls`` option object from ``obj`` (an instance or None) and the flat keywords
    ``flat`` (flat name -> the given value or a :class:`Default`). A flat keyword given
    together with ``obj`` is a UsageError naming both; a field the function has no flat
    keyword for (``Records(stop_at_target=True)`` in ``search_k``) is one if set."""
    keyword, names = KEYWORD[cls], FLAT[cls]
    if obj is None:
        return cls(**{field: value(flat[name]) for field, name in names.items() if name in flat})
    if not isinstance(obj, cls):
        raise UsageError(f"{keyword}: expected mpi_teleport.{cls.__name__}(...) or None, "
                         f"got {obj!r}")
    for field in fields(cls):
        name = names[field.name]
        if name not in flat:
            if getattr(obj, field.name) != field.default:
                raise UsageError(f"{keyword}={cls.__name__}({field.name}=...): {name} is not "
                                 f"a setting of this function")
        elif not isinstance(flat[name], Default):
            raise UsageError(f"{name}= and {keyword}={cls.__name__}({field.name}=...) set the "
                             f"same setting: give one of them")
    return obj


def merge_latency(latency, clock, compute_time) -> Latency:
    """:func:`merge` for ``latency=``, which takes a model spec (the flat keyword) or a
    :class:`Latency` object."""
    if isinstance(latency, Latency):
        return merge(Latency, latency, latency=Default("none"), clock=clock,
                     compute_time=compute_time)
    return merge(Latency, None, latency=latency, clock=clock, compute_time=compute_time)
