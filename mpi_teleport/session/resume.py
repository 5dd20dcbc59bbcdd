"""Resuming a run, the same way for the command line and the Python API.

A checkpoint's manifest records the settings that determine the run's numbers (its
``config``): the problem (its name and parameters, or for a Python object its class and a
fingerprint: dim, dtype, a hash of ``initial()`` and its ``describe()`` facts), n, k, the
seed, the step size (a number, or a function's name and values at a few rounds), the
momentum, the topology and the algorithm. A resume compares them with its own
(:func:`check_source`) and refuses a difference in one line naming every setting that
differs; only what the settings table marks
(:func:`~mpi_teleport.session.settings.resumable_changes`) may change. Before anything starts every process
checks every file of the checkpoint (:func:`check_source`), so a damaged one stops every
rank alike. A directory that holds another run's checkpoints is never written into by a
fresh run (:func:`check_target`).

The command line's ``--resume DIR`` also takes the settings it is not given from the
manifest (:func:`inherit`), each checked as if it were a flag; a checkpoint written
through the API with a problem, step-size function or topology function the command line
cannot rebuild is refused in one line that says to resume it through the API.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from ..checkpoint import (LAYOUT_MATRIX, MANIFEST, stored_tokens, any_checkpoint,
                          check_arrays, newest, token_file)
from ..checkpoint.find import round_entries
from ..errors import API, UsageError
from ..disk.output import dumps
from ..disk.paths import show
from ..problems.torch_names import is_torch_optimizer
from .settings import recorded_when_set, resumable_changes

# Settings never taken from the checkpoint (they describe this invocation only). Where a
# resumed run writes is taken from where its checkpoint lies on disk, never from the
# manifest's text, so a manifest cannot direct writes into another run's directory.
_NOT_INHERITED = frozenset({"resume", "progress", "out", "checkpoint_dir",
                            "spares"})  # (spare ranks: this job's allocation)
OBJECT = "object "  # a problem given as a Python object: "object module.Class"
_LR_PROBES = (0, 1, 2, 10, 100, 1000)


# ----------------------------------------------------------------------------- what a run is
def describe_lr(lr):
    """The step size as a manifest records it: the number, or for a function its name and
    its values at a few rounds (so another function, or the same one over other numbers,
    is told apart)."""
    if not callable(lr):
        return float(lr)
    values = []
    for t in _LR_PROBES:
        try:
            values.append(f"lr({t})={float(lr(t))!r}")
        except Exception as exc:  # noqa: BLE001  (defined only over the run's rounds)
            values.append(f"lr({t}) raised {type(exc).__name__}")
    name = getattr(lr, "__qualname__", type(lr).__name__)
    arguments = getattr(lr, "arguments", None)  # (a torch scheduler's: step_size=1, gamma=0.7)
    return f"function {name}: " + ", ".join(values) + (f" [{arguments}]" if arguments else "")


def _lr_values(text: str) -> tuple[str, dict, str] | None:
    """(name, {round: value text}, arguments) of a step-size function's description
    (:func:`describe_lr`), or None for a number."""
    found = re.fullmatch(r"function (\S+): (.*?)(?: \[(.*)\])?", text) if isinstance(text, str) else None
    if found is None:
        return None
    values = dict(re.findall(r"lr\((\d+)\)(?:=| )([^,]+)", found.group(2)))
    return found.group(1), values, found.group(3) or ""


def _comparable(name: str, value):
    """A setting as a resume compares it: a step-size function by its name and values
    (the scheduler's arguments are said, not compared: a checkpoint written without them
    still matches)."""
    described = _lr_values(value) if name == "lr" else None
    return value if described is None else described[:2]


def describe_problem(problem, seed: int, fingerprint: bool = True) -> dict:
    """The problem's identity for a manifest. The paper's quadratic built with the run's
    seed is named as the command line names it (``problem='quadratic'``, dim, sigma2,
    zeta2), so ``--resume`` can rebuild it; a problem whose ``describe()`` names a
    ``problem`` likewise; any other object by its class and a fingerprint (with
    ``fingerprint=False``, for a run that neither writes nor reads checkpoints, without
    the hash of ``initial()``)."""
    inner = getattr(problem, "problem", problem)  # (behind problem.with_defaults)
    cls = type(inner)
    quadratic = (cls.__module__, cls.__qualname__) == ("mpi_teleport.problems.quadratic", "Quadratic")
    if quadratic:  # (known by name: the problems import the package)
        named = {"problem": "quadratic", "dim": int(inner.d), "sigma2": float(inner.sigma2),
                 "zeta2": float(inner.zeta2)}
        # the command line builds it with the run's seed; another one is recorded apart
        return named if int(inner.seed) == int(seed) else {**named, "problem_seed": int(inner.seed)}
    facts = {}
    describe = getattr(problem, "describe", None)
    if callable(describe):
        facts = {k: v for k, v in dict(describe() or {}).items() if k != "device"}
    if isinstance(facts.get("problem"), str):
        return facts
    import numpy as np

    digest = None
    if fingerprint:
        x0 = problem.initial()
        digest = hashlib.sha256(np.ascontiguousarray(x0).tobytes()).hexdigest()[:16]
    return {"problem": f"{OBJECT}{cls.__module__}.{cls.__qualname__}",
            "problem_facts": {"dim": int(problem.dim), "dtype": str(np.dtype(problem.dtype)),
                              "initial_sha256": digest, **facts}}


def plain(record: dict) -> dict:
    """``record`` as it reads back from JSON (tuples as lists, numpy numbers as Python
    ones), so a fresh record compares equal to a saved one."""
    return json.loads(dumps(record))


# ----------------------------------------------------------------------------- comparing
def seeded(settings: dict) -> dict:
    """``settings`` with the quadratic's own seed spelt out (the command line builds it
    with the run's seed and records none)."""
    if settings.get("problem") == "quadratic" and "problem_seed" not in settings:
        return {**settings, "problem_seed": settings.get("seed")}
    return settings


def filled(saved: dict, current: dict) -> tuple[dict, dict]:
    """``saved`` and ``current`` with the quadratic's own seed spelt out (:func:`seeded`)
    and, where one of them holds a setting the table records only when set (the
    optimizer, ...) and the other does not, the other's value as its default: an
    absent setting is at its default, so a checkpoint written with Adam and a resume
    without it differ."""
    saved, current = seeded(saved), seeded(current)
    sparse = recorded_when_set()
    for name in set(saved) ^ set(current):
        if name in sparse:
            (current if name in saved else saved).setdefault(name, sparse[name])
    return saved, current


def mismatch(saved: dict, current: dict) -> list[str]:
    """The settings both know whose values differ and that a resume may not change
    (:func:`~mpi_teleport.session.settings.resumable_changes`, from the table)."""
    saved, current = filled(saved, current)
    may_change = resumable_changes()
    return [name for name in current if name in saved and name not in may_change
            and _comparable(name, saved[name]) != _comparable(name, _as_saved(current[name]))]


def _as_saved(value):
    """A setting as it reads back from a manifest (a tuple, e.g. --fail's, as a list)."""
    return list(value) if isinstance(value, tuple) else value


def _short(value) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _difference(name: str, saved, current, naming) -> str:
    """How one setting differs, as a message shows it: both values, where they are long
    the part around their first difference; two step-size functions by the first round
    where they differ, with both values (and the schedulers' arguments, where known)."""
    ours, theirs = _lr_values(current), _lr_values(saved)
    if name == "lr" and ours is not None and theirs is not None:
        def named(described):
            return described[0] + (f"({described[2]})" if described[2] else "")

        rounds = sorted(set(ours[1]) | set(theirs[1]), key=int)
        first = next((t for t in rounds if ours[1].get(t) != theirs[1].get(t)), None)
        sep = " " if naming.cli else "="
        at = ("" if first is None else f" (they differ first at round {first}: "
              f"{theirs[1].get(first, 'none')} then, {ours[1].get(first, 'none')} now)")
        return f"{naming.name(name)}{sep}{named(theirs)}, not {named(ours)}{at}"
    sep = " " if naming.cli else "="
    a, b = (repr(v) if isinstance(v, str) else str(v) for v in (saved, current))
    if max(len(a), len(b)) > 80:
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        start = max(0, i - 30)

        def part(text):
            return ("..." if start else "") + text[start:start + 70] + (
                "..." if len(text) > start + 70 else "")

        a, b = part(a), part(b)
    return f"{naming.name(name)}{sep}{a}, not {b}"


# what describe_problem records of a problem: the problem object's, never a flag of a script
_PROBLEM_FACTS = frozenset({"problem", "dim", "sigma2", "zeta2", "problem_seed", "problem_facts"})


def refuse_mismatch(where: str, saved: dict, current: dict, names: list[str], naming) -> UsageError:
    """One line naming every differing setting, its checkpoint value and this run's. A
    script's flags (``naming.user_gave``: nothing is taken from the checkpoint) name as
    flags only what the user gave: the problem's own facts are the problem's, another
    setting is at its default."""
    saved, current = filled(saved, current)
    gave = getattr(naming, "user_gave", None)
    if gave is None:
        parts = [_difference(n, saved[n], current[n], naming) for n in names]
        drop = ", ".join(naming.name(n) for n in names)
        what = "drop " + drop if naming.cli else "pass the checkpoint's values"
    else:
        parts, give = [], []
        for n in names:
            if n in _PROBLEM_FACTS and n not in gave:
                parts.append("a problem with " + _difference(n, saved[n], current[n], API))
                continue
            parts.append(_difference(n, saved[n], current[n], naming)
                         + ("" if n in gave else " (the default)"))
            give.append(naming.given(n, saved[n]))
        what = " and ".join(
            ([f"give {', '.join(give)}"] if give else [])
            + (["pass the problem the checkpoint was written with"]
               if any(n in _PROBLEM_FACTS and n not in gave for n in names) else []))
    return UsageError(f"{where}: the checkpoint was written with {'; '.join(parts)}; a resumed "
                      f"run keeps the settings that determine its numbers ({what} or start a "
                      f"new run)")


def check_source(where: str, path: Path, manifest: dict, *, nodes: int, k,
                 rounds: int | None, current: dict, naming) -> Path:
    """The checkpoint a run resumes from, checked against this run's settings and on disk
    (every array file's header), or UsageError. Runs on every process before any
    communication. ``rounds`` None: not known yet (``--epochs``: the problem sets it;
    :func:`check_rounds` then)."""
    if int(manifest.get("n", -1)) != nodes:
        raise UsageError(f"{where}: the checkpoint has n={manifest.get('n')} nodes, this run "
                         f"n={nodes}; resume with the same number of nodes (ranks)")
    if manifest.get("k") != k:
        raise UsageError(f"{where}: the checkpoint has k={manifest.get('k')}, this run k={k}; "
                         f"resume with the same k")
    saved = manifest.get("config") or {}
    bad = mismatch(saved, current)
    if bad:
        raise refuse_mismatch(where, saved, current, bad, naming)
    if rounds is not None:
        check_rounds(where, manifest, rounds, naming.given("rounds", rounds))
    reason = _missing_files(path, manifest)
    if reason:
        raise UsageError(f"{where}: checkpoint {path} is damaged: {reason}")
    check_arrays(path, manifest)  # headers only: truncated, pickled, object, mis-shaped
    return path


def check_rounds(where: str, manifest: dict, rounds: int, given: str) -> None:
    """UsageError when the checkpoint lies beyond the run's last round ``rounds``
    (``given``: how the user set it, e.g. '--rounds 1000' or '--epochs 50 (2250 rounds)')."""
    r = int(manifest["round"])
    if r > rounds:
        raise UsageError(f"{where}: the checkpoint is at round {r}, beyond {given}")


def _length(rounds=None, epochs=None) -> str | None:
    if epochs is not None:
        return f"{float(epochs):g} epochs"
    return None if rounds is None else f"{int(rounds)} rounds"


def check_auto_length(where: Path, manifest: dict, naming, *, rounds=None, epochs=None) -> None:
    """``resume="auto"`` continues only the run it would start (a job rerun as it was
    given): UsageError when the checkpoint in ``where`` is of a run of another length
    (``rounds``, or ``epochs``, as this run gives them; None: not given, the
    checkpoint's). A run of another length -- a finished run given more rounds, a real
    run in the directory of a one-round trial -- continues only when asked, with
    ``resume=DIR``."""
    saved = manifest.get("config") or {}
    theirs = _length(saved.get("rounds"), saved.get("epochs"))
    mine = _length(rounds, epochs)
    if mine is None or theirs is None or mine == theirs:
        return
    given = naming.given("resume", "auto")
    raise UsageError(f"{given}: {show(where)} holds a run of {theirs} (at round "
                     f"{manifest.get('round')}), this one is of {mine}; {given} continues "
                     f"only the same run: to continue that one for {mine}, give "
                     f"{naming.given('resume', str(where))}; to start afresh, choose another "
                     f"{naming.name('out')} or delete that run")


def _missing_files(directory: Path, manifest: dict) -> str | None:
    """A reason why the checkpoint's array files are not all there, or None."""
    if manifest.get("layout") == LAYOUT_MATRIX:
        names = [f"{name}.npy" for name in manifest.get("arrays", [])]
    else:
        names = [token_file(m) for m in range(stored_tokens(manifest) if "k" in manifest else 0)]
    present = set(os.listdir(directory))  # one directory read, not one stat per token
    missing = [name for name in names if name not in present]
    return f"{len(missing)} file(s) missing, e.g. {missing[0]}" if missing else None


def check_target(target: Path, source: Path | None, hint: str, naming) -> None:
    """A run may write checkpoints into ``target``: it holds no other run's checkpoints
    (``source``: the checkpoint this run resumes, whose directory it continues) and
    nothing else named like a checkpoint. ``hint``: how to resume (``--resume DIR``)."""
    target = Path(target)
    _, strays = round_entries(target)
    if strays:
        raise UsageError(f"checkpoint directory {show(target)} holds {strays[0].name}, which is "
                         f"not a checkpoint directory; move it away or choose another "
                         f"checkpoint directory")
    existing = newest(target)
    if existing is not None and (source is None or existing[0].parent.resolve()
                                 != Path(source).parent.resolve()):
        advice = (f"continue it with {hint}" if source is None
                  else f"choose another {naming.name('checkpoint_dir')}")
        raise UsageError(f"checkpoint directory {show(target)} already holds checkpoints of a "
                         f"run (newest: round {existing[1]['round']}); {advice}, or delete it")


# ----------------------------------------------------------------------------- the command line
def not_rebuildable(saved: dict) -> str | None:
    """Why the command line cannot rebuild the run a manifest's settings describe (a
    problem, step size or topology given as a Python object), or None."""
    problem, lr, topology = saved.get("problem"), saved.get("lr"), saved.get("topology")
    if isinstance(problem, str) and problem.startswith(OBJECT):
        return f"its problem is a Python object ({problem[len(OBJECT):]})"
    if "problem_seed" in saved and saved.get("problem_seed") != saved.get("seed"):
        return (f"its problem was built with seed {saved['problem_seed']}, the run's seed "
                f"{saved.get('seed')}")
    if isinstance(lr, str) and lr.startswith("function "):  # (describe_lr)
        return f"its step size is {_short(lr)}"
    if isinstance(topology, str) and topology.startswith("custom:"):
        return f"its topology is a Python function ({topology[7:]})"
    flags = saved.get("optimizer") and optimizer_flags(saved["optimizer"],
                                                       saved.get("optimizer_args"))
    if saved.get("optimizer") and (flags is None or (  # (numpy's: the three by name)
            saved.get("problem") == "quadratic" and flags["optimizer"] not in _BY_NAME)):
        return f"its optimizer is {str(saved['optimizer']).split('(')[0]} (optimizer=)"
    return None


_OPTIMIZER_FLAGS = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw"}
_BY_NAME = frozenset(_OPTIMIZER_FLAGS.values())  # (the three the package steps itself)


def optimizer_flags(text, arguments=None) -> dict | None:
    """The command line's ``--optimizer`` and its options of a manifest's optimizer (its
    step rule's ``describe()``: ``AdamW(betas=(0.9, 0.999), eps=1e-08,
    weight_decay=0.05)``), or None for one the command line cannot give. ``arguments``:
    the manifest's ``optimizer_args`` (the optimizer was named with them: its name alone,
    the arguments are inherited as their own setting); a torch.optim class other than
    the three is its name alone likewise."""
    import re

    name, _, args = str(text).partition("(")
    flag = _OPTIMIZER_FLAGS.get(name)
    if flag is None or arguments is not None:
        return {"optimizer": flag or name} if is_torch_optimizer(name) else None
    out: dict = {"optimizer": flag}
    for key in ("weight_decay", "eps"):
        found = re.search(rf"{key}=([^,)]+)", args)
        if found:
            out[key] = float(found.group(1))
    found = re.search(r"betas=\(([^,]+), ([^)]+)\)", args)
    if found:
        out["betas"] = (float(found.group(1)), float(found.group(2)))
    return out


def inherit(raw: dict) -> dict:
    """``--resume DIR``: settings not given take the checkpoint's values, each checked as
    the flag would be. Raises UsageError when DIR holds no complete checkpoint, or one
    the command line cannot continue."""
    from .settings import coerce, field_names, setting

    path = raw["resume"]
    p = Path(path)
    if not p.exists():
        raise UsageError(f"--resume {path}: no such directory; give a run directory (--out of "
                         f"the run), a checkpoint directory or one round-* checkpoint")
    if not p.is_dir():
        raise UsageError(f"--resume {path}: not a directory; give a run directory (--out of "
                         f"the run), a checkpoint directory or one round-* checkpoint")
    found = any_checkpoint(p)
    if found is None:
        raise UsageError(f"--resume {path}: no complete checkpoint there (a checkpoint is "
                         f"complete once its {MANIFEST} is written); was the run started with "
                         f"--checkpoint-every R?")
    saved = found[1].get("config") or {}
    why = not_rebuildable(saved)
    if why:
        raise UsageError(f"--resume {path}: the checkpoint was written through the Python API "
                         f"and {why}, which the command line cannot rebuild; resume it through "
                         f"the API (resume={str(path)!r} with the same problem and settings)")
    source = f"checkpoint {found[0] / MANIFEST}"
    if saved.get("optimizer"):  # (recorded as the rule it steps with; another optimizer
        # given takes none of its options: the comparison below names the difference)
        flags = optimizer_flags(saved["optimizer"], saved.get("optimizer_args")) or {}
        saved = {**({"optimizer": flags["optimizer"]} if "optimizer" in raw else flags),
                 **{k: v for k, v in saved.items() if k != "optimizer"
                    and not (k == "optimizer_args" and "optimizer" in raw)}}
    merged = {name: None if saved[name] is None else coerce(setting(name), saved[name], source)
              for name in field_names() if name in saved and name not in _NOT_INHERITED
              and name not in raw}
    merged.update(raw)
    compare = merged.get("algorithm") == "compare" and saved.get("algorithm") == "compare"
    if raw.get("out") is not None and raw.get("checkpoint_dir") is None:
        # (its checkpoints were kept apart: the new ones go beside them, not into --out)
        merged["checkpoint_dir"] = kept_apart(found[0], compare)
    if raw.get("out") is None:
        out, ck_dir = _where_resumed(path, found[0], saved, raw.get("checkpoint_dir") is None,
                                     merged.get("algorithm") == "compare")
        merged["out"] = out
        if raw.get("checkpoint_dir") is None:
            merged["checkpoint_dir"] = ck_dir
    return merged


def kept_apart(round_path: Path, compare: bool = False) -> str | None:
    """Where a resume that names no checkpoint directory writes its checkpoints, when the
    run it resumes kept them apart from its files (``--checkpoint-dir``): the directory
    the resumed checkpoint lies in (for both legs of ``compare``: its parent), so that the
    next resume from there finds the newest; None in the default layout
    (``<out>/checkpoints`` beside the run's ``config.json``), where the checkpoints follow
    the run's files. Read from where the checkpoint lies on disk, never from a manifest."""
    ck = Path(round_path).resolve().parent
    if ck.name == "checkpoints" and (ck.parent / "config.json").is_file():
        return None
    return str(ck.parent if compare else ck)


def _where_resumed(given: str, round_path: Path, saved: dict, derive_ck: bool, compare: bool):
    """(out, checkpoint_dir) of a resume that names no ``--out``: the run it resumes, found
    from where its checkpoint lies on disk (never from the manifest's text). ``compare``:
    this resume runs both algorithms (one leg of a compare run resumed alone writes into
    that leg's directory)."""
    ck = Path(round_path).resolve().parent
    compare = compare and saved.get("algorithm") == "compare"
    apart = kept_apart(round_path, compare)
    if apart is None:
        # the default layout: <out>[/<algorithm>]/checkpoints beside the run's files
        return str(ck.parent.parent if compare else ck.parent), None
    ck_dir = apart if derive_ck else None
    if saved.get("out") is not None:
        raise UsageError(f"--resume {given}: that run kept its checkpoints apart from its "
                         f"files (--out {show(saved['out'])} then); give --out DIR for this "
                         f"run's files")
    return None, ck_dir
