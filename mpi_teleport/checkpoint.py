"""Checkpoint and resume: ``--checkpoint-every R``, ``--checkpoint-dir DIR``, ``--resume DIR``.

A checkpoint holds the state of a run at the *start* of round r: every token (its model
x, its momentum v, any further per-token arrays), the recorder (the metrics logged so
far, rounds_to_target, elapsed time) and, with the latency layer, every rank's logical
clock. All randomness is keyed by (seed, node, round) (``rng.py``), so nothing else is
needed: a resumed run continues with rounds r..T-1 and its ``metrics.jsonl`` equals that
of an uninterrupted run bit for bit (``time_s`` aside).

Layout (default directory ``<out>/checkpoints``; with ``compare`` one per algorithm,
``<out>/<algorithm>/checkpoints``, or ``DIR/<algorithm>`` under ``--checkpoint-dir DIR``)::

    round-00000120/          the state at the start of round 120
        token-000000.npz     MPI: token 0's arrays (x, v, ...), written by its holder
        ...                  (one file per token; k files)
        x.npy, v.npy         simulator: all k tokens as (k, d) matrices
        MANIFEST.json        written LAST (MPI: by rank 0 after a barrier): the round,
                             the full config, the recorder state, the clocks; a
                             directory without it is incomplete and ignored
    round-00000100/          the previous one (--keep-checkpoints, default 2)

Every file is written under a temporary name in the same directory, fsync'ed and
renamed, so a reader never sees half a file; a job killed while writing leaves an
incomplete directory that resume skips and the next checkpoint prunes. Either backend
reads either layout, so a simulator checkpoint resumes under MPI and vice versa.

``--resume DIR`` accepts a run directory (the ``--out`` of the run), a checkpoint
directory or one ``round-*`` directory, and continues from the newest complete
checkpoint. Settings not given on the command line are taken from the checkpoint; those
that determine the numbers (problem, k, topology, lr, seed, ...) must not change, while
``--rounds`` (at least the checkpoint's round), ``--out``, ``--log-every``, ``--variant``,
``--latency`` and the checkpoint flags may.

    python -m mpi_teleport.checkpoint newest DIR   # path of the newest complete checkpoint
    python -m mpi_teleport.checkpoint show DIR     # its manifest, without the records
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UsageError
from .output import dumps, write_atomic, write_atomic_with

FORMAT = 1
MANIFEST = "MANIFEST.json"
_ROUND_RE = re.compile(r"^round-(\d{8,})$")
LAYOUT_TOKENS, LAYOUT_MATRIX = "tokens", "matrix"

# Settings a resumed run may change: they never change the numbers of the tokens.
RESUMABLE_CHANGES = frozenset({
    "out", "progress", "rounds", "stop_at_target", "log_every", "variant", "latency", "clock",
    "compute_time", "checkpoint_every", "checkpoint_dir", "keep_checkpoints", "resume",
    "eval_every", "data_dir", "download", "device",
})
# Settings never taken from the checkpoint (they describe this invocation only).
_NOT_INHERITED = frozenset({"resume", "progress"})


# ----------------------------------------------------------------------------- paths
def round_dir(base: Path, r: int) -> Path:
    return Path(base) / f"round-{r:08d}"


def token_file(m: int) -> str:
    return f"token-{m:06d}.npz"


def leg_dir(cfg, algorithm: str) -> Path | None:
    """Where the checkpoints of one run (one algorithm of ``compare``) go, or None."""
    if cfg.checkpoint_dir is not None:
        base = Path(cfg.checkpoint_dir)
        return base / algorithm if cfg.algorithm == "compare" else base
    from .report import out_dir

    out = out_dir(cfg, algorithm)
    return None if out is None else out / "checkpoints"


# ----------------------------------------------------------------------------- writing
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def token_arrays(state) -> dict[str, np.ndarray]:
    """The arrays that make up a token held in a TokenState: x (parameters), v (momentum)
    when there is momentum, plus any arrays in ``state.buffers`` (a dict, if the state has
    one: e.g. normalisation statistics of a network)."""
    out = {"x": state.x}
    if getattr(state, "v", None) is not None:
        out["v"] = state.v
    out.update(getattr(state, "buffers", None) or {})
    return out


def restore_token(state, arrays: dict[str, np.ndarray]) -> None:
    """Copy a token's arrays into a TokenState (the inverse of :func:`token_arrays`)."""
    targets = token_arrays(state)
    for name, target in targets.items():
        if name not in arrays:
            raise ValueError(f"checkpoint lacks array {name!r} of the token")
        np.copyto(target, arrays[name].reshape(target.shape))


def save_token(directory: Path, m: int, arrays: dict[str, np.ndarray]) -> None:
    """MPI layout: one file per token, written by the rank that holds it."""
    write_atomic_with(Path(directory) / token_file(m),
                      lambda f: np.savez(f, **{k: np.ascontiguousarray(v) for k, v in arrays.items()}))


def save_matrix(directory: Path, arrays: dict[str, np.ndarray]) -> None:
    """Simulator layout: NAME.npy = the (k, d) matrix of all tokens' array NAME."""
    for name, value in arrays.items():
        write_atomic_with(Path(directory) / f"{name}.npy",
                          lambda f, v=value: np.save(f, np.ascontiguousarray(v)))


def write_manifest(directory: Path, manifest: dict) -> None:
    """Mark a checkpoint complete: its manifest is the last file written."""
    directory = Path(directory)
    write_atomic(directory / MANIFEST, dumps({"format": FORMAT, **manifest}, indent=1) + "\n")
    _fsync_dir(directory)


def prune(base: Path, keep: int) -> None:
    """Keep the ``keep`` newest complete checkpoints; remove older ones and every
    incomplete directory (a write that was interrupted)."""
    base = Path(base)
    done = [path for _, path, _ in complete(base)]
    survivors = set(done[-keep:]) if keep > 0 else set()
    for path in _round_dirs(base):
        if path not in survivors:
            shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- reading
_manifests: dict = {}  # (path, mtime, size) -> manifest: start-up reads each one once


def read_manifest(directory: Path) -> dict | None:
    """The manifest of a complete checkpoint, or None (missing, unreadable, other format)."""
    path = Path(directory) / MANIFEST
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key not in _manifests:
            with open(path) as f:
                _manifests[key] = json.load(f)
        data = _manifests[key]
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or "round" not in data:
        return None
    return data


def _round_dirs(base: Path) -> list[Path]:
    try:
        entries = list(Path(base).iterdir())
    except OSError:
        return []
    found = [(int(m.group(1)), p) for p in entries if p.is_dir() and (m := _ROUND_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def complete(base: Path) -> list[tuple[int, Path, dict]]:
    """Complete checkpoints under ``base``, oldest first: [(round, path, manifest)]."""
    out = []
    for path in _round_dirs(base):
        manifest = read_manifest(path)
        if manifest is not None:
            out.append((int(manifest["round"]), path, manifest))
    return sorted(out, key=lambda item: item[0])


def newest(base: Path) -> tuple[Path, dict] | None:
    """The newest complete checkpoint in ``base`` (a checkpoint directory), or None."""
    found = complete(base)
    return (found[-1][1], found[-1][2]) if found else None


def locate(path: Path, algorithm: str | None = None, compare: bool = False) -> tuple[Path, dict] | None:
    """The checkpoint ``--resume path`` means for one run: ``path`` itself (a round-*
    directory), the newest in ``path`` (a checkpoint directory) or in ``path/checkpoints``
    (a run directory); for a leg of ``compare``, under ``path/<algorithm>`` likewise."""
    path = Path(path)
    roots = [path / algorithm, path] if compare and algorithm else [path]
    for root in roots:
        manifest = read_manifest(root)
        if manifest is not None:
            if algorithm is None or manifest.get("algorithm") == algorithm:
                return root, manifest
            continue
        for candidate in (root, root / "checkpoints"):
            found = newest(candidate)
            if found is not None and (algorithm is None or found[1].get("algorithm") == algorithm):
                return found
    return None


def any_checkpoint(path: Path) -> tuple[Path, dict] | None:
    """Any complete checkpoint ``--resume path`` could mean (for reading its settings):
    the run itself, or either algorithm of a ``compare`` run."""
    found = locate(path)
    if found is not None:
        return found
    try:
        subdirs = sorted(p for p in Path(path).iterdir() if p.is_dir())
    except OSError:
        return None
    for sub in subdirs:
        found = locate(sub)
        if found is not None:
            return found
    return None


def load_token(directory: Path, manifest: dict, m: int) -> dict[str, np.ndarray]:
    """Token m's arrays from either layout."""
    directory = Path(directory)
    if manifest.get("layout") == LAYOUT_MATRIX:
        return {name: np.array(np.load(directory / f"{name}.npy", mmap_mode="r")[m])
                for name in manifest["arrays"]}
    with np.load(directory / token_file(m)) as data:
        return {name: data[name] for name in data.files}


def load_matrix(directory: Path, manifest: dict) -> dict[str, np.ndarray]:
    """All tokens' arrays as (k, d) matrices, from either layout."""
    directory = Path(directory)
    if manifest.get("layout") == LAYOUT_MATRIX:
        return {name: np.load(directory / f"{name}.npy") for name in manifest["arrays"]}
    rows = [load_token(directory, manifest, m) for m in range(int(manifest["k"]))]
    return {name: np.stack([row[name] for row in rows]) for name in manifest["arrays"]}


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


# ----------------------------------------------------------------------------- validation
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
    from .config import field_names

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
    from . import report

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


@dataclass
class Plan:
    """Checkpointing of one run (one algorithm of compare)."""

    dir: Path | None  # where its checkpoints go (None: nowhere)
    every: int  # periodic checkpoints every this many rounds (0: none)
    keep: int
    source: Path | None = None  # the checkpoint it resumes from
    manifest: dict | None = None

    @property
    def start(self) -> int:
        return int(self.manifest["round"]) if self.manifest else 0

    @property
    def periodic(self) -> bool:
        """Periodic (and final) checkpoints are asked for and have a place to go."""
        return self.dir is not None and self.every > 0

    def due(self, r: int, rounds: int) -> bool:
        """A periodic checkpoint after round r (not at 0 and not at the end: the final
        checkpoint is written separately)."""
        return self.periodic and 0 < r < rounds and r % self.every == 0


def plan(cfg, algorithm: str) -> Plan:
    """The (already validated) checkpoint plan of one run."""
    p = Plan(leg_dir(cfg, algorithm), cfg.checkpoint_every, cfg.keep_checkpoints)
    if cfg.resume is not None:
        found = locate(Path(cfg.resume), algorithm, cfg.algorithm == "compare")
        if found is not None:
            p.source, p.manifest = found
    return p


# ----------------------------------------------------------------------------- runtime
class Keeper:
    """Checkpoints, resume and signal stops of one run, for either back end.

    The engine calls :meth:`restore` before the loop, :meth:`after_round` after every
    round and :meth:`finish` at the end. After a round, on logging and checkpoint rounds
    (every round in one process, where it costs nothing) the processes agree on whether
    any got a signal (one Allreduce of an integer under MPI), write the periodic or the
    signal's checkpoint, and stop together with :class:`signals.Terminated`.
    """

    def __init__(self, plan: Plan, backend, recorder, terminator=None, *, settings: dict,
                 spec, log_every: int, stop_at_target: bool, resume_from=None):
        self.plan, self.backend, self.rec, self.terminator = plan, backend, recorder, terminator
        self.settings, self.spec = settings, spec
        self.log_every, self.stop_at_target = log_every, stop_at_target
        self.resume_from = resume_from
        self.wall_offset = float(plan.manifest.get("wall_s", 0.0)) if plan.manifest else 0.0
        self._t0 = time.perf_counter() - self.wall_offset
        self._last_round = None  # the latest round after which the loop ran

    @property
    def start(self) -> int:
        """The round the run continues from (0 for a fresh run)."""
        return self.plan.start

    @property
    def resumed(self) -> bool:
        return self.plan.manifest is not None

    def rounds(self, start: int, stop: int) -> range:
        """The rounds left of [start, stop): none after the final checkpoint of a run that
        stopped at its target (--stop-at-target)."""
        m = self.plan.manifest
        stopped = bool(m and m.get("final") and self.stop_at_target
                       and (m.get("recorder") or {}).get("rounds_to_target") is not None)
        return range(stop, stop) if stopped else range(min(max(start, self.start), stop), stop)

    def restore(self):
        """(directory, manifest) of the checkpoint to resume, after restoring the recorder
        (root) and this process's logical clock; None for a fresh run."""
        m = self.plan.manifest
        if m is None:
            return None
        if self.rec is not None and m.get("recorder") is not None and self.backend.root:
            self.rec.restore(m["recorder"])
        restore_clock = getattr(self.backend, "restore_clock", None)
        if restore_clock is not None:
            restore_clock(m.get("clocks_us"))
        self._t0 = time.perf_counter() - self.wall_offset
        return self.plan.source, m

    def after_round(self, r: int, stop: bool, total: int) -> None:
        from .signals import Terminated

        self._last_round = r
        if stop or r >= total:
            return  # the run ends here anyway: a signal now changes nothing
        due = self.plan.due(r, total)
        term = self.terminator
        if self.backend.checks_every_round:
            if not due and not (term is not None and term.signum):
                return
        elif r % self.log_every and not due:
            return  # neither a logging nor a checkpoint round
        paused = self.rec.pause()
        flush = getattr(self.backend.transport, "flush", None) if hasattr(self.backend, "transport") else None
        if flush is not None:
            flush()  # latency layer: deferred sends out before the collectives
        signum = self.backend.agree(term.signum if term is not None else 0)
        path = None
        if due or (signum and self.plan.dir is not None):
            path = self._save(r, "signal" if signum else "every")
        self.rec.resume(paused)
        if signum:
            raise Terminated(signum, r, path, self.resume_from)

    def finish(self, summary: dict | None) -> Path | None:
        """The final checkpoint (collective) when periodic checkpoints were asked."""
        if not self.plan.periodic or self._last_round is None:
            return None  # (nothing ran: resumed from the end, its checkpoint stands)
        return self._save(self._last_round, "final", summary)

    def _save(self, r: int, reason: str, summary=None) -> Path:
        backend = self.backend
        directory = round_dir(self.plan.dir, r)
        directory.mkdir(parents=True, exist_ok=True)
        arrays = backend.save(directory)
        clocks = backend.clocks(r)
        backend.barrier()  # every token file is in place
        if backend.root:
            spec = self.spec
            manifest = {
                "round": r,
                "reason": reason,  # every | signal | final
                "final": reason == "final",
                "algorithm": spec.algorithm,
                "variant": spec.variant,
                "k": spec.tokens,
                "n": spec.nodes,
                "dim": backend.dim,
                "layout": backend.layout,
                "arrays": arrays,
                "backend": backend.name,
                "config": self.settings,
                "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"),
                "recorder": self.rec.state() if self.rec is not None else None,
                "wall_s": time.perf_counter() - self._t0,
                "clocks_us": clocks,
                "summary": summary,
            }
            if self.rec is not None:
                self.rec.files.flush()  # metrics.jsonl up to this round, as the checkpoint has it
            write_manifest(directory, manifest)
            prune(self.plan.dir, self.plan.keep)
        return directory


# ----------------------------------------------------------------------------- command line
def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m mpi_teleport.checkpoint",
        description="Inspect checkpoints. newest: print the newest complete checkpoint "
                    "under DIR (a run, checkpoint or round-* directory); exit 1 if there is "
                    "none (for job scripts). show: print its manifest (records omitted).")
    parser.add_argument("command", choices=("newest", "show"))
    parser.add_argument("dir")
    args = parser.parse_args(argv)
    found = any_checkpoint(Path(args.dir))
    if found is None:
        print(f"no complete checkpoint under {args.dir}", file=sys.stderr)
        return 1
    if args.command == "newest":
        print(found[0])
    else:
        manifest = dict(found[1])
        if isinstance(manifest.get("recorder"), dict):
            manifest["recorder"] = {k: v for k, v in manifest["recorder"].items() if k != "records"}
        print(json.dumps({"path": str(found[0]), **manifest}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
