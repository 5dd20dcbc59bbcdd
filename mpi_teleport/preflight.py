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
from .checkpoint import (LAYOUT_MATRIX, MANIFEST, any_checkpoint, check_arrays, locate, newest,
                         token_file)
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
# Settings never taken from the checkpoint (they describe this invocation only). Where a
# resumed run writes is taken from where its checkpoint lies on disk, never from the
# manifest's text, so a manifest cannot direct writes into another run's directory.
_NOT_INHERITED = frozenset({"resume", "progress", "out", "checkpoint_dir"})
_PATH_FLAGS = ("out", "checkpoint_dir", "resume")
_NAME_MAX, _PATH_MAX = 255, 4095  # Linux limits of one name and of a whole path, in bytes


def load(raw: dict, world_size: int | None = None):
    """Raw settings (flags over a TOML file) -> a validated Config, checked against the
    disk: settings a ``--resume`` leaves out come from its checkpoint."""
    raw = absolute_paths(raw)
    if raw.get("resume") is not None:
        given = raw.get("nodes") is not None
        raw = inherit(raw)
        if not given and raw.get("nodes") is not None:
            raw["_inherited_nodes"] = True
    return check_fits(check(resolve(raw, world_size)), world_size)


# input floats per sample of each built-in network problem (8x8, 28x28, 3x32x32)
_FEATURES = {"digits": 64, "fashion-mnist": 784, "cifar10": 3072}
_QUADRATIC_VECTORS = 6  # per token in the simulator: x, v, spare, mixed, gradient, noise
_MPI_VECTORS = 10  # per rank: its token (x, v), the received ones, gradient, noise, stamps
_BATCH_COPIES = 4  # a batch's input, its activations and their gradients, roughly


def memory_bytes() -> int | None:
    """The memory this process may use: physical memory, or a lower address-space limit."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            total = min(total, soft)
    except (ImportError, ValueError, OSError):
        pass
    return total


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _tokens_here(cfg, world_size) -> int:
    """Tokens one process holds at once: one per rank under MPI; in the simulator the most
    any requested run has (k, n for DSGD and for Algorithm 2's first phase)."""
    if world_size is not None:
        return 1
    most = 1
    for algorithm, k in report.runs_requested(cfg):
        most = max(most, cfg.nodes if algorithm == "dsgd" or k == "auto" else int(k))
    return most


def check_fits(cfg, world_size=None):
    """Refuse, with the estimate, a run whose arrays cannot fit in this machine's memory
    (before anything is allocated: numpy would fail deep inside with a traceback, or the
    kernel would kill the job). Returns ``cfg``."""
    available = memory_bytes()
    if available is None:
        return cfg
    tokens = _tokens_here(cfg, world_size)
    if cfg.problem == "quadratic":
        per = _MPI_VECTORS if world_size is not None else _QUADRATIC_VECTORS
        need = 8 * cfg.dim * (per * tokens + 2)
        if need > available:
            where = "each rank" if world_size is not None else "the simulator"
            raise UsageError(
                f"--dim {cfg.dim}: {where} needs about {_gib(need)} for {tokens} token(s) of "
                f"{cfg.dim} float64 values, more than the {_gib(available)} of memory here; "
                f"choose a smaller --dim" + ("" if world_size is not None else
                                              " or fewer tokens (--k, --nodes for dsgd)"))
    features = _FEATURES.get(cfg.problem)
    if features is not None:
        need = cfg.batch_size * (features * 4 * _BATCH_COPIES + 8)
        if need > available:
            raise UsageError(
                f"--batch-size {cfg.batch_size}: one {cfg.problem} batch needs about "
                f"{_gib(need)} ({features} float32 inputs per sample, with activations), "
                f"more than the {_gib(available)} of memory here; choose a smaller --batch-size")
    return cfg


def show(path) -> str:
    """A path as a message may quote it: printable, and short."""
    text = repr(str(path))[1:-1] if not str(path).isprintable() else str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(str(path))} characters)"


def check_path(flag: str, value) -> str:
    """A path setting that the operating system can take (no NUL byte, names within the
    length limits), or UsageError saying which."""
    text = str(value)
    if not text:
        raise UsageError(f"{_flag(flag)} is empty; give a directory")
    if "\0" in text:
        raise UsageError(f"{_flag(flag)} {show(text)}: contains a NUL byte; give a plain path")
    encoded = os.fsencode(text)
    if len(encoded) > _PATH_MAX:
        raise UsageError(f"{_flag(flag)} {show(text)}: the path is {len(encoded)} bytes, longer "
                         f"than the {_PATH_MAX} a path may have; choose a shorter one")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > _NAME_MAX:
        raise UsageError(f"{_flag(flag)} {show(text)}: a name in it is {len(longest)} bytes, "
                         f"longer than the {_NAME_MAX} a file name may have; choose a shorter one")
    return text


def absolute_paths(raw: dict) -> dict:
    """``--out``, ``--checkpoint-dir`` and ``--resume`` resolved against the working
    directory where they are given (``~`` expanded), so config.json and every manifest
    store where the files really are, whatever directory a later resume starts in."""
    raw = dict(raw)
    for name in _PATH_FLAGS:
        if raw.get(name) is not None:
            text = check_path(name, raw[name])
            try:
                expanded = os.path.expanduser(text)
            except (RuntimeError, KeyError):
                expanded = text
            if text.startswith("~") and expanded == text:  # ~nosuchuser: not a literal name
                raise UsageError(f"{_flag(name)} {show(text)}: cannot expand "
                                 f"{text.split('/')[0]} (no such user); give the path")
            text = expanded
            raw[name] = os.path.abspath(text)
    return raw


def lock_dirs(cfg) -> list[tuple[Path, str]]:
    """The directories a run writes into and must hold alone while it runs (the run
    directory, an explicit checkpoint directory, and the checkpoint directories of
    periodic checkpoints), as (path, flag) pairs."""
    found: list[tuple[Path, str]] = []
    if cfg.out is not None:
        found.append((Path(cfg.out), "--out"))
    if cfg.checkpoint_dir is not None:
        found.append((Path(cfg.checkpoint_dir), "--checkpoint-dir"))
    if cfg.checkpoint_every:
        for algorithm, k in report.runs_requested(cfg):
            target = leg_dir(cfg, algorithm) if k != "auto" else None
            if target is not None:
                found.append((target, "checkpoint directory"))
    unique, seen = [], set()
    for path, what in found:
        key = os.path.abspath(path)
        if key not in seen:
            seen.add(key)
            unique.append((path, what))
    return unique


def hold(cfg):
    """Lock every directory of :func:`lock_dirs` for this process (the simulator, or rank 0
    under MPI); returns a callable that releases them. A directory another job holds, or
    that cannot hold a lock file, is a UsageError naming the holder or the reason."""
    return hold_dirs(lock_dirs(cfg))


def hold_dirs(dirs) -> "callable":
    """Lock each (path, flag) of ``dirs`` (see :func:`hold`)."""
    from . import lock

    held = []

    def release():
        while held:
            held.pop().release()

    try:
        for path, what in dirs:
            held.append(lock.acquire(path, what))
    except lock.LockError as exc:
        release()
        raise UsageError(str(exc)) from None
    return release


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
    if raw.get("out") is None:
        out, ck_dir = _where_resumed(path, found[0], saved, raw.get("checkpoint_dir") is None,
                                     merged.get("algorithm") == "compare")
        merged["out"] = out
        if raw.get("checkpoint_dir") is None:
            merged["checkpoint_dir"] = ck_dir
    return merged


def _where_resumed(given: str, round_path: Path, saved: dict, derive_ck: bool, compare: bool):
    """(out, checkpoint_dir) of a resume that names no ``--out``: the run it resumes, found
    from where its checkpoint lies on disk (never from the manifest's text). ``compare``:
    this resume runs both algorithms (one leg of a compare run resumed alone writes into
    that leg's directory)."""
    ck = Path(round_path).resolve().parent
    compare = compare and saved.get("algorithm") == "compare"
    if ck.name == "checkpoints" and (ck.parent / "config.json").is_file():
        # the default layout: <out>[/<algorithm>]/checkpoints beside the run's files
        return str(ck.parent.parent if compare else ck.parent), None
    ck_dir = str(ck.parent if compare else ck) if derive_ck else None
    if saved.get("out") is not None:
        raise UsageError(f"--resume {given}: that run kept its checkpoints apart from its "
                         f"files (--out {show(saved['out'])} then); give --out DIR for this "
                         f"run's files")
    return None, ck_dir


def _mismatch(saved: dict, cfg: dict) -> list[str]:
    return [name for name in cfg if name in saved and name not in RESUMABLE_CHANGES
            and name != "algorithm" and saved[name] != cfg[name]]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_settings(cfg):
    """Check the checkpoint flags of a resolved Config against the disk (before any
    communication); their values alone were checked by config.resolve. Raises
    UsageError with one line."""
    auto = any(k == "auto" for _, k in report.runs_requested(cfg))
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
    check_path(flag.lstrip("-").replace("-", "_"), path)
    try:
        if path.exists() and not path.is_dir():
            raise UsageError(f"{flag} {show(path)}: exists and is not a directory")
        probe = path
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            raise UsageError(f"{flag} {show(path)}: cannot create it, {show(probe)} is not a "
                             f"directory")
        if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {show(path)}: {show(probe)} is not writable")
        if probe != path and _refuses_directories(probe):
            raise UsageError(f"{flag} {show(path)}: {show(probe)} is on a file system that "
                             f"takes no new directories; choose another place")
    except OSError as exc:
        raise UsageError(f"{flag} {show(path)}: {exc.strerror or exc}; choose another "
                         f"directory") from None


# file systems whose directories refuse mkdir even for root (kernel interfaces)
_PSEUDO_FS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "securityfs",
                        "tracefs", "configfs", "pstore", "bpf", "efivarfs"})


def _refuses_directories(path: Path) -> bool:
    """Whether ``path`` lies on a kernel pseudo file system (``/proc``, ``/sys``), where
    creating a directory fails even as root although access() says it is writable."""
    best, fstype = "", None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount = fields[1].replace("\\040", " ")
                target = str(path.resolve())
                if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                    best, fstype = mount, fields[2]
    except OSError:
        return False
    return fstype in _PSEUDO_FS


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
    check_arrays(path, manifest)  # headers only: truncated, pickled, object, mis-shaped
    return path


def plan(cfg, algorithm: str) -> Plan:
    """The (already validated) checkpoint plan of one run."""
    p = Plan(leg_dir(cfg, algorithm), cfg.checkpoint_every, cfg.keep_checkpoints)
    if cfg.resume is not None:
        found = locate(Path(cfg.resume), algorithm, cfg.algorithm == "compare")
        if found is not None:
            p.source, p.manifest = found
    return p


