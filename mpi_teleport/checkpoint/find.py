"""Finding checkpoints: the complete ones under a directory, the newest, the one a
``--resume PATH`` means, and pruning old and incomplete ones."""
from __future__ import annotations

import shutil
from pathlib import Path

from .store import _ROUND_RE, RUN_MARKER, read_manifest


def _round_dirs(base: Path) -> list[Path]:
    return round_entries(base)[0]


def round_entries(base: Path) -> tuple[list[Path], list[Path]]:
    """(the round-* directories under ``base``, oldest first; the entries named like one
    that are not directories: a file a checkpoint could not be written over)."""
    try:
        entries = list(Path(base).iterdir())
    except OSError:
        return [], []
    named = [(int(m.group(1)), p) for p in entries if (m := _ROUND_RE.match(p.name))]
    found = [(r, p) for r, p in named if p.is_dir()]
    strays = [p for r, p in sorted(named) if not p.is_dir()]
    return [p for _, p in sorted(found)], strays


def complete(base: Path, strict: bool = True) -> list[tuple[int, Path, dict]]:
    """Complete checkpoints under ``base``, oldest first: [(round, path, manifest)]. A
    damaged manifest raises DamagedCheckpointError (``strict=False``: skipped)."""
    out = []
    for path in _round_dirs(base):
        manifest = read_manifest(path, strict)
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


def owner(path: Path) -> str | None:
    """The run id of the lineage that wrote a round-* directory: its manifest's, or for an
    incomplete one the marker written before any array; None when neither is there (a
    directory this package did not write, or one from before run ids)."""
    manifest = read_manifest(path, strict=False)
    if manifest is not None:
        value = manifest.get("run_id")
        return value if isinstance(value, str) else None
    try:
        return (Path(path) / RUN_MARKER).read_text(encoding="utf-8").strip() or None
    except (OSError, ValueError):
        return None


def prune(base: Path, keep: int, run_id: str | None) -> None:
    """Keep the ``keep`` newest complete checkpoints of the lineage ``run_id``; remove its
    older ones and its incomplete directories (interrupted writes). Directories written
    by anyone else (another run id, none at all: a user's own ``round-00000001/``) stay."""
    base = Path(base)
    if run_id is None:
        return
    ours = [path for path in _round_dirs(base) if owner(path) == run_id]
    done = [path for path in ours if read_manifest(path, strict=False) is not None]
    survivors = set(done[-keep:]) if keep > 0 else set()
    for path in ours:
        if path not in survivors:
            shutil.rmtree(path, ignore_errors=True)


def auto_resume(out: Path | None, checkpoint_dir: Path | None, algorithm: str) -> Path | None:
    """``resume="auto"``: the directory to resume (the checkpoint directory, else ``out``)
    when it holds a complete checkpoint of an ``algorithm`` run -- unfinished, it is
    continued; finished, the run returns its result -- or None: a fresh run. One line
    (UsageError) without a directory to look in."""
    from ..errors import UsageError

    if out is None and checkpoint_dir is None:
        raise UsageError("resume='auto' needs out= or checkpoint_dir=: the directory to "
                         "continue a run from, or to start one in")
    for place in (checkpoint_dir, out):
        if place is not None and Path(place).is_dir() and locate(Path(place), algorithm):
            return Path(place)
    return None
