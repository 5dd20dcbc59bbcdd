"""Checkpoint files: the layout, atomic writes and reads (no policy, no MPI).

Layout of one checkpoint, the state at the *start* of round r::

    round-00000120/
        token-000000.npz     MPI: token 0's arrays (x, v, ...), written by its holder
        ...                  (one file per token; k files)
        x.npy, v.npy         simulator: all k tokens as (k, d) matrices
        MANIFEST.json        written LAST: the round, the settings, the recorder state,
                             the clocks; a directory without it is incomplete

Every file is written under a temporary name in the same directory, fsync'ed and
renamed, so a reader never sees half a file. Either back end reads either layout.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from ..output import dumps, write_atomic, write_atomic_with

FORMAT = 1
MANIFEST = "MANIFEST.json"
_ROUND_RE = re.compile(r"^round-(\d{8,})$")
LAYOUT_TOKENS, LAYOUT_MATRIX = "tokens", "matrix"

def round_dir(base: Path, r: int) -> Path:
    return Path(base) / f"round-{r:08d}"


def token_file(m: int) -> str:
    return f"token-{m:06d}.npz"


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


