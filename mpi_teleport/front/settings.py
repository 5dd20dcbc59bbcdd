"""The invariants of a run, in one place, for every entry point.

The command line (:func:`mpi_teleport.front.config.resolve`, after the flags are parsed) and
the Python API (:mod:`mpi_teleport.api`) both check their values here, so the two
cannot drift: the same rule, the same message, only the spelling of a setting differs
(``--log-every`` on the command line, ``log_every`` in Python; a :class:`Naming`).
Every refusal is a :class:`~mpi_teleport.errors.UsageError` of one line that says what
was wrong and what to do; no wrong type reaches numpy (a traceback) or runs silently.

:data:`RULES` holds the rule of each single setting (type and range);
:func:`check_values` applies them; :func:`check_run` the rules that tie settings together
(k and n, checkpoints and a place to write them). Pure: checks against the disk are
:mod:`mpi_teleport.front.preflight`'s and :mod:`mpi_teleport.front.resume`'s.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable

from ..errors import API, CLI, Naming, UsageError  # noqa: F401  (re-exported)
from ..latency.model import check_compute_time, parse_spec
from ..problems.sampling import SAMPLINGS  # noqa: F401  (the one list of choices)
from ..core.topology import TOPOLOGIES

ALGORITHMS = ("teleportation", "dsgd", "search")  # what runs (RunSpec.algorithm)
VARIANTS = ("overlap", "simple")  # Algorithm 3, Algorithm 1
CLOCKS = ("real", "virtual")
SEED_LIMIT = 2**63




# ----------------------------------------------------------------------------- one value
def _integer(value, field: str, naming: Naming) -> int:
    """An int (numpy integers too), never a bool, a float or a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError(f"{naming.name(field)}: expected an integer, got {value!r}")
    return int(value)


def _number(value, field: str, naming: Naming) -> float:
    """A finite real number (ints and numpy floats too), never a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{naming.name(field)}: expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise UsageError(f"{naming.name(field)} must be a finite number, got {value}")
    return value


def at_least(minimum: int, why: str = ""):
    def rule(value, field, naming):
        value = _integer(value, field, naming)
        if value < minimum:
            word = f"at least {minimum}" if minimum else f">= {minimum}"
            raise UsageError(f"{naming.name(field)} must be {word}{why}, got {value}")
        return value
    return rule


def positive(value, field, naming):
    value = _number(value, field, naming)
    if value <= 0:
        raise UsageError(f"{naming.name(field)} must be > 0, got {value}")
    return value


def optional(rule):
    return lambda value, field, naming: None if value is None else rule(value, field, naming)


def non_negative(value, field, naming):
    value = _number(value, field, naming)
    if value < 0:
        raise UsageError(f"{naming.name(field)} must be >= 0, got {value}")
    return value


def seed(value, field, naming):
    value = _integer(value, field, naming)
    if not 0 <= value < SEED_LIMIT:
        raise UsageError(f"{naming.name(field)} must be in [0, 2^63), got {value}")
    return value


def momentum(value, field, naming):
    value = _number(value, field, naming)
    if not 0 <= value < 1:
        raise UsageError(f"{naming.name(field)} must be in [0, 1), got {value}")
    return value


def fraction(value, field, naming):
    """A fraction in [0, 1): 0 holds nothing out (the paper trains on the whole set)."""
    value = _number(value, field, naming)
    if not 0 <= value < 1:
        raise UsageError(f"{naming.name(field)} must be in [0, 1), got {value}")
    return value


def step_size(value, field, naming):
    """A number > 0, or (Python) a function of the round whose value at round 0 is one:
    a function returning None, a string or a negative step (gradient ascent) is refused
    before the run rather than failing or diverging inside it."""
    if callable(value) and not naming.cli:
        try:
            first = value(0)
        except Exception as exc:  # noqa: BLE001  (the user's function: say what it did)
            raise UsageError(f"{field}: the step-size function failed at round 0 "
                             f"({type(exc).__name__}: {exc})") from None
        if isinstance(first, bool) or not isinstance(first, numbers.Real) \
                or not math.isfinite(first) or first <= 0:
            raise UsageError(f"{field}: the step-size function must return a finite number "
                             f"> 0, returned {first!r} at round 0")
        return value
    if value is None or isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        what = "a number > 0" if naming.cli else "a number > 0 or a function of the round"
        raise UsageError(f"{naming.name(field)}: expected {what}, got {value!r}")
    return positive(value, field, naming)


def flag(value, field, naming):
    if isinstance(value, bool):
        return value
    if not naming.cli and value in (0, 1) and not isinstance(value, float):
        return bool(value)
    raise UsageError(f"{naming.name(field)}: expected true or false, got {value!r}")


def choice(options: tuple, functions: bool = False):
    """One of ``options``; with ``functions`` (Python) also a callable."""
    def rule(value, field, naming):
        if functions and callable(value) and not naming.cli:
            return value
        if not isinstance(value, str) or value not in options:
            more = " or pass a function (k, t) -> W" if functions and not naming.cli else ""
            raise UsageError(f"{naming.name(field)}: unknown value {value!r}; choose one of "
                             f"{', '.join(options)}{more}")
        return value
    return rule


def latency(value, field, naming):
    if not isinstance(value, str):
        raise UsageError(f"{naming.name(field)}: expected a latency spec such as none, "
                         f"const:US or mod:TAU, got {value!r}")
    try:
        parse_spec(value, None, load=False)  # the text; a matrix file: the preflight
    except UsageError as exc:
        raise naming.retell(exc) from None
    return value


def compute_time(value, field, naming):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{naming.name(field)}: expected a number, got {value!r}")
    value = float(value)
    try:
        check_compute_time(value)
    except UsageError as exc:
        raise naming.retell(exc) from None
    return value


def path(value, field, naming):
    """A path setting: a non-empty str or os.PathLike (checked against the system's limits
    by :func:`mpi_teleport.disk.paths.check_path`)."""
    if value is None:
        return None
    import os

    from ..disk.paths import check_path

    if not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{naming.name(field)}: expected a path, got {value!r}")
    text = os.fspath(value)
    if isinstance(text, bytes):
        raise UsageError(f"{naming.name(field)}: expected a path as text, got {value!r}")
    check_path(field, text, naming)
    return value


# The rule of each single setting; a setting absent here has no range to keep.
RULES: dict[str, Callable] = {
    "nodes": at_least(1),
    "rounds": at_least(1),
    "log_every": at_least(1),
    "eval_every": optional(at_least(1)),
    "batch_size": at_least(1),
    "dim": at_least(1),
    "checkpoint_every": at_least(0, " (0 = no periodic checkpoints)"),
    "keep_checkpoints": at_least(1),
    "spares": at_least(0, " (0 = no hot spares)"),
    "agree_every": at_least(1, " (1 = every round)"),
    "seed": seed,
    "lr": step_size,
    "momentum": momentum,
    "sigma2": non_negative,
    "zeta2": non_negative,
    "target": optional(positive),
    "epochs": optional(positive),
    "alpha": positive,
    "val_fraction": fraction,
    "stop_at_target": flag,
    "variant": choice(VARIANTS),
    "clock": choice(CLOCKS),
    "sampling": choice(SAMPLINGS),
    "topology": choice(TOPOLOGIES, functions=True),
    "latency": latency,
    "compute_time": compute_time,
    "out": path,
    "checkpoint_dir": path,
    "resume": path,
}


def check_values(values: dict, naming: Naming) -> dict:
    """``values`` with every setting :data:`RULES` knows checked and normalised (numpy
    numbers to Python ones), or UsageError for the first that breaks its rule."""
    out = dict(values)
    for field, value in values.items():
        rule = RULES.get(field)
        if rule is not None:
            out[field] = rule(value, field, naming)
    return out


# ----------------------------------------------------------------------------- together
def check_k(k, n: int, algorithm: str, naming: Naming):
    """k of a Teleportation run: an integer 1 <= k <= n ('auto' on the command line:
    Algorithm 2). DSGD ignores k."""
    if naming.cli and k == "auto":
        return k
    k = _integer(k, "k", naming)
    if k < 1:
        raise UsageError(f"{naming.name('k')} must be at least 1 (one active node), got {k}")
    if k > n and algorithm != "dsgd":
        raise UsageError(f"{naming.given('k', k)} exceeds the number of nodes {n}; choose "
                         f"1 <= k <= {n}")
    return k


def check_checkpoints(values: dict, naming: Naming, search: bool = False) -> None:
    """Checkpoint settings that only make sense together: periodic checkpoints need a
    place to write; Algorithm 2 takes none."""
    every, resume = values.get("checkpoint_every") or 0, values.get("resume")
    if search and (every or resume is not None):
        which = "resume" if resume is not None else "checkpoint_every"
        k_auto = naming.given("k", "auto") if naming.cli else "search_k"
        raise UsageError(f"{naming.name(which)} is not supported with {k_auto} (Algorithm 2 "
                         f"runs 2T rounds, usually short); choose k, or run the search without "
                         f"checkpoints")
    if every and values.get("out") is None and values.get("checkpoint_dir") is None:
        if naming.cli:
            raise UsageError("--checkpoint-every needs a place to write: give --out DIR "
                             "(checkpoints go to DIR/checkpoints) or --checkpoint-dir DIR")
        raise UsageError("checkpoint_every needs a place to write: give out=DIR (checkpoints "
                         "go to DIR/checkpoints) or checkpoint_dir=DIR")
