"""The Python API's keywords, written once: their types (typed keyword bundles, which an
IDE and a type checker read through ``**keywords: Unpack[...]``), their defaults (one
table, :data:`DEFAULTS`, most of them the settings table's) and the signatures
``help()`` shows, made of both (:func:`signature`). Internal: the public names are
:func:`mpi_teleport.teleportation`, :func:`~mpi_teleport.dsgd`,
:func:`~mpi_teleport.search_k` and :meth:`mpi_teleport.RunSettings.from_keywords`.

A keyword is added here once (its type in the bundle of the functions that take it, its
default in :data:`DEFAULTS`) and explained once, in the manual's page of the keywords
(docs/reference/keywords.md); tests/test_api_keywords.py holds the three together.
"""
from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, TypedDict, TypeVar

from ..core.schedulers import Scheduler
from ..core.topology import Topology
from .settings import Checkpoints, Default, Latency, Records, keyword_default, unset


class RunKeywords(TypedDict, total=False):
    """The keywords of all three training functions (beside ``nodes``, ``k`` and
    ``search_k``'s required ``lr``, which each function names itself)."""

    rounds: int | None
    epochs: float | None
    lr_step: str
    topology: Topology
    momentum: float
    nesterov: bool
    seed: int
    comm: Any
    out: str | Path | None
    records: Records | None
    log_every: int
    target: float | None
    progress: bool
    callback: Callable[[dict[str, Any]], object] | None
    trace: str | Path | None
    latency: str | Latency
    clock: str
    compute_time: float | None


class TrainingKeywords(RunKeywords, total=False):
    """:func:`mpi_teleport.dsgd`'s keywords (and :func:`~mpi_teleport.teleportation`'s):
    the step as a PyTorch script gives it, evaluation, checkpoints, elastic mode."""

    lr: float | Callable[[int], float] | Scheduler | None
    optimizer: Any
    stop_at_target: bool
    eval_every: int | None
    eval_every_epochs: float | None
    log_every_epochs: int | None
    eval_at_start: bool
    checkpoints: Checkpoints | None
    checkpoint_every: int
    checkpoint_dir: str | Path | None
    keep_checkpoints: int
    resume: str | Path | None
    elastic: bool
    fail: str | Sequence[str | tuple[int, int]] | None
    spares: int


class TeleportationKeywords(TrainingKeywords, total=False):
    """:func:`mpi_teleport.teleportation`'s keywords."""

    variant: str


class SearchKeywords(RunKeywords, total=False):
    """:func:`mpi_teleport.search_k`'s keywords."""

    variant: str
    select: str


# Every keyword's default, in the order help() lists them: the settings table's
# (keyword_default: the row's default, or the Python keyword's where it differs); unset:
# the same, told apart from that value given (the keywords an option object can also set:
# settings.merge).
DEFAULTS: dict[str, Any] = {
    "rounds": None, "lr": None, "epochs": keyword_default("epochs"), "lr_step": "epoch",
    "optimizer": None, "topology": keyword_default("topology"),
    "momentum": keyword_default("momentum"), "nesterov": keyword_default("nesterov"),
    "variant": keyword_default("variant"), "seed": keyword_default("seed"), "comm": None,
    "out": keyword_default("out"), "select": keyword_default("k_select"),
    "records": None, "log_every": unset("log_every"), "target": unset("target"),
    "stop_at_target": unset("stop_at_target"), "progress": unset("progress"),
    "callback": Default(None), "eval_every": unset("eval_every"),
    "eval_every_epochs": None, "log_every_epochs": unset("log_every_epochs"),
    "eval_at_start": unset("eval_at_start"), "trace": unset("trace"),
    "checkpoints": None, "checkpoint_every": unset("checkpoint_every"),
    "checkpoint_dir": unset("checkpoint_dir"),
    "keep_checkpoints": unset("keep_checkpoints"), "resume": unset("resume"),
    "latency": unset("latency"), "clock": unset("clock"),
    "compute_time": unset("compute_time"), "elastic": keyword_default("elastic"),
    "fail": keyword_default("fail"), "spares": keyword_default("spares"),
}

# Each function: the keywords it names itself (required) and its bundle.
FUNCTIONS: dict[str, tuple[tuple[str, ...], Any]] = {
    "teleportation": (("nodes", "k"), TeleportationKeywords),
    "dsgd": (("nodes",), TrainingKeywords),
    "search_k": (("nodes", "lr"), SearchKeywords),
}


def names(bundle: Any) -> list[str]:
    """A bundle's keywords, in :data:`DEFAULTS`' order."""
    keys = bundle.__required_keys__ | bundle.__optional_keys__
    return [name for name in DEFAULTS if name in keys]


def filled(function: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` (one call's keywords, the required ones included) with every keyword
    ``function`` takes that was not given at its default; TypeError, as Python's own,
    for a keyword it does not take or a required one missing."""
    required, bundle = FUNCTIONS[function]
    known = {*required, *names(bundle)}
    for name in given:
        if name not in known:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
    missing = [name for name in required if name not in given]
    if missing:
        raise TypeError(f"{function}() missing required keyword-only argument: "
                        f"{missing[0]!r}")
    return {**{name: DEFAULTS[name] for name in names(bundle)}, **given}


_Function = TypeVar("_Function", bound=Callable[..., Any])


def signature(function: _Function) -> _Function:
    """Decorator: ``function``'s signature as ``help()`` and ``inspect`` show it: its own
    parameters (``problem``, the required keywords) then its bundle's, each with its type
    and default, in place of ``**keywords`` (the function itself, its type included, is
    left as it is: type checkers and IDEs read its ``Unpack``)."""
    own = inspect.signature(function)
    _, bundle = FUNCTIONS[function.__name__]
    hints = bundle.__annotations__
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=DEFAULTS[name],
                                 annotation=getattr(hints[name], "__forward_arg__", hints[name]))
               for name in names(bundle)]
    function.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    return function
