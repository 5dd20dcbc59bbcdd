"""Checks against the disk before a run starts (the command line's preflight).

Configuration validation (:func:`mpi_teleport.config.resolve`) is pure; what depends on
files happens here, before any communication: the settings a ``--resume`` inherits from
its checkpoint, the data directory, a latency matrix file, the checkpoint flags and
where a run may write. :func:`load` is the whole path from raw settings to a Config.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import report
from .checkpoint import LAYOUT_MATRIX, MANIFEST, any_checkpoint, locate, newest, token_file
from .checkpoint.keeper import Plan
from .config import NETWORK_PROBLEMS, field_names, resolve
from .errors import UsageError
from .latency.model import parse_spec

# Settings a resumed run may change: they never change the numbers of the tokens.
RESUMABLE_CHANGES = frozenset({
    "out", "progress", "rounds", "stop_at_target", "log_every", "variant", "latency", "clock",
    "compute_time", "checkpoint_every", "checkpoint_dir", "keep_checkpoints", "resume",
    "eval_every", "data_dir", "download", "device",
})
# Settings never taken from the checkpoint (they describe this invocation only).
_NOT_INHERITED = frozenset({"resume", "progress"})




def load(raw: dict, world_size: int | None = None):
    """Raw settings (flags over a TOML file) -> a validated Config, checked against the
    disk: settings a ``--resume`` leaves out come from its checkpoint."""
    if raw.get("resume") is not None:
        given = raw.get("nodes") is not None
        raw = inherit(raw)
        if not given and raw.get("nodes") is not None:
            raw["_inherited_nodes"] = True
    return check(resolve(raw, world_size))


def check(cfg):
    """The checks of a resolved Config against the disk; returns it, or raises UsageError."""
    if cfg.problem in NETWORK_PROBLEMS and cfg.problem != "digits" and not cfg.download:
        if not os.path.isdir(cfg.data_dir):
            raise UsageError(f"--data-dir {cfg.data_dir!r} does not exist; put the {cfg.problem} "
                             "files there or add --download on a machine with internet")
    parse_spec(cfg.latency, cfg.nodes)  # reads and checks a matrix file
    return check_settings(cfg)


def leg_dir(cfg, algorithm: str) -> Path | None:
    """Where the checkpoints of one run (one algorithm of ``compare``) go, or None."""
    if cfg.checkpoint_dir is not None:
        base = Path(cfg.checkpoint_dir)
        return base / algorithm if cfg.algorithm == "compare" else base
    from .report import out_dir

    out = out_dir(cfg, algorithm)
    return None if out is None else out / "checkpoints"


def _check_files(directory: Path, manifest: dict) -> str | None:
    """A reason why the checkpoint's array files are not all there, or None."""
    directory = Path(directory)
    if manifest.get("layout") == LAYOUT_MATRIX:
        names = [f"{name}.npy" for name in manifest.get("arrays", [])]
    else:
        names = [token_file(m) for m in range(int(manifest.get("k", 0)))]
    present = set(os.listdir(directory))  # one directory read, not one stat per token
    missing = [name for name in names if name not in present]
    if missing:
        return f"{len(missing)} file(s) missing, e.g. {missing[0]}"
    return None


def inherit(raw: dict) -> dict:
    """``--resume DIR``: settings not given take the checkpoint's values. Raises
    UsageError when DIR holds no complete checkpoint."""
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
    merged = {name: saved[name] for name in field_names()
              if name in saved and name not in _NOT_INHERITED}
    merged.update(raw)
    return merged


def _mismatch(saved: dict, cfg: dict) -> list[str]:
    return [name for name in cfg if name in saved and name not in RESUMABLE_CHANGES
            and name != "algorithm" and saved[name] != cfg[name]]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_settings(cfg):
    """Validate the checkpoint flags of a resolved Config (before any communication).
    Raises UsageError with one line."""
    if cfg.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every must be >= 0 (0 = no periodic checkpoints), "
                         f"got {cfg.checkpoint_every}")
    if cfg.keep_checkpoints < 1:
        raise UsageError(f"--keep-checkpoints must be at least 1, got {cfg.keep_checkpoints}")
    auto = any(k == "auto" for _, k in report.runs_requested(cfg))
    if auto and (cfg.checkpoint_every or cfg.resume is not None):
        flag = "--resume" if cfg.resume is not None else "--checkpoint-every"
        raise UsageError(f"{flag} is not supported with --k auto (Algorithm 2 runs 2T rounds, "
                         f"usually short); choose k, or run the search without checkpoints")
    if cfg.checkpoint_every and cfg.out is None and cfg.checkpoint_dir is None:
        raise UsageError("--checkpoint-every needs a place to write: give --out DIR "
                         "(checkpoints go to DIR/checkpoints) or --checkpoint-dir DIR")
    if cfg.checkpoint_dir is not None:
        _check_writable("--checkpoint-dir", Path(cfg.checkpoint_dir))
    if cfg.out is not None:
        _check_writable("--out", Path(cfg.out))
    if auto:
        return cfg
    resumed_any = False
    for algorithm, k in report.runs_requested(cfg):
        k = cfg.nodes if algorithm == "dsgd" else k
        source = None
        if cfg.resume is not None:
            source = _check_source(cfg, algorithm, k)
            resumed_any = resumed_any or source is not None
        target = leg_dir(cfg, algorithm)
        if target is not None:
            existing = newest(target)
            if existing is not None and (source is None or existing[0].parent.resolve()
                                         != source.parent.resolve()):
                hint = (f"continue it with --resume {cfg.out or target}" if source is None
                        else "choose another --checkpoint-dir")
                raise UsageError(f"checkpoint directory {target} already holds checkpoints of a "
                                 f"run (newest: round {existing[1]['round']}); {hint}, or delete it")
    if cfg.resume is not None and not resumed_any:
        raise UsageError(f"--resume {cfg.resume}: no complete checkpoint of this run there")
    return cfg


def _check_writable(flag: str, path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise UsageError(f"{flag} {path}: cannot create it, {probe} is not a directory")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: {probe} is not writable")


def _check_source(cfg, algorithm: str, k: int) -> Path | None:
    """The checkpoint one run resumes from (validated), or None (compare: that
    algorithm has none yet and starts afresh)."""
    found = locate(Path(cfg.resume), algorithm, cfg.algorithm == "compare")
    if found is None:
        if cfg.algorithm == "compare":
            return None
        other = any_checkpoint(Path(cfg.resume))
        what = f" (it holds a {other[1].get('algorithm')} run)" if other else ""
        raise UsageError(f"--resume {cfg.resume}: no complete checkpoint of a {algorithm} "
                         f"run there{what}")
    path, manifest = found
    where = f"--resume {cfg.resume}"
    if int(manifest.get("n", -1)) != cfg.nodes:
        raise UsageError(f"{where}: the checkpoint has n={manifest.get('n')} nodes, this run "
                         f"n={cfg.nodes}; resume with the same number of nodes (ranks)")
    if manifest.get("k") != k:
        raise UsageError(f"{where}: the checkpoint has k={manifest.get('k')}, this run k={k}")
    bad = _mismatch(manifest.get("config") or {}, cfg.to_dict())
    if bad:
        saved = manifest["config"]
        first = bad[0]
        raise UsageError(f"{where}: the checkpoint was written with {_flag(first)} "
                         f"{saved[first]}, not {getattr(cfg, first)}; a resumed run keeps the "
                         f"settings that determine its numbers (drop {_flag(first)} or start a "
                         f"new run)")
    r = int(manifest["round"])
    if r > cfg.rounds:
        raise UsageError(f"{where}: the checkpoint is at round {r}, beyond --rounds {cfg.rounds}")
    reason = _check_files(path, manifest)
    if reason:
        raise UsageError(f"{where}: checkpoint {path} is damaged: {reason}")
    return path


def plan(cfg, algorithm: str) -> Plan:
    """The (already validated) checkpoint plan of one run."""
    p = Plan(leg_dir(cfg, algorithm), cfg.checkpoint_every, cfg.keep_checkpoints)
    if cfg.resume is not None:
        found = locate(Path(cfg.resume), algorithm, cfg.algorithm == "compare")
        if found is not None:
            p.source, p.manifest = found
    return p


