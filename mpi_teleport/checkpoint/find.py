"""Finding checkpoints: the complete ones under a directory, the newest, the one a
``--resume PATH`` means, and pruning old and incomplete ones."""
from __future__ import annotations

import shutil
from pathlib import Path

from .store import _ROUND_RE, read_manifest

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


def prune(base: Path, keep: int) -> None:
    """Keep the ``keep`` newest complete checkpoints; remove older ones and every
    incomplete directory (a write that was interrupted)."""
    base = Path(base)
    done = [path for _, path, _ in complete(base)]
    survivors = set(done[-keep:]) if keep > 0 else set()
    for path in _round_dirs(base):
        if path not in survivors:
            shutil.rmtree(path, ignore_errors=True)


