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
from typing import Any, cast

import numpy as np

from ..errors import UsageError
from ..disk.output import dumps, write_atomic, write_atomic_with

# 2: schedule v2 (hash words, mpi_teleport/DESIGN.md §3.2). A format-1 checkpoint comes
# from a version whose schedule placed the tokens differently: resuming it here would
# continue a different run, so it is refused (not migrated).
FORMAT = 2
MANIFEST = "MANIFEST.json"
RUN_MARKER = ".run_id"  # in a round-* directory: the lineage that writes it (for pruning)
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
        if arrays[name].size != target.size:
            raise ValueError(f"checkpoint array {name!r} has {arrays[name].size} values, the "
                             f"token {target.size}")
        np.copyto(target, arrays[name].reshape(target.shape))


def save_token(directory: Path, m: int, arrays: dict[str, np.ndarray]) -> None:
    """MPI layout: one file per token, written by the rank that holds it."""
    write_atomic_with(Path(directory) / token_file(m),
                      # (cast: numpy's stubs would match the dict to allow_pickle)
                      lambda f: np.savez(f, **cast(dict[str, Any], {
                          k: np.ascontiguousarray(v) for k, v in arrays.items()})))


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
class DamagedCheckpointError(UsageError):
    """A checkpoint whose manifest or array files are not what its writer leaves: one
    line naming the directory and the fault (never a silent fallback to older data)."""


class EarlierScheduleError(DamagedCheckpointError):
    """A checkpoint written by an mpi_teleport whose schedule differs from this one's
    (format 1): intact, but its rounds cannot continue here. A subclass of
    :class:`DamagedCheckpointError` so every reader refuses it the same way."""


def _damaged(directory, reason: str) -> DamagedCheckpointError:
    return DamagedCheckpointError(
        f"checkpoint {directory} is damaged: {reason}; resume from another round-* "
        f"directory or start afresh")


_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # an array name: no path in it
# field -> (accepted types, description); bool is excluded from int explicitly below
_FIELDS = {
    "round": (int, "an integer >= 0"),
    "k": (int, "an integer >= 1"),
    "n": (int, "an integer >= 1"),
    "dim": (int, "an integer >= 1"),
    "layout": (str, f"'{LAYOUT_TOKENS}' or '{LAYOUT_MATRIX}'"),
    "arrays": (list, "a list of array names"),
    "config": (dict, "an object"),
}


def check_manifest(directory, data) -> dict:
    """``data`` (a parsed MANIFEST.json) if every field a reader uses has the right type
    and value, else :class:`DamagedCheckpointError`. The round must equal the number in
    the directory's name, so a renamed or copied checkpoint never resumes at a wrong round."""
    if not isinstance(data, dict):
        raise _damaged(directory, f"{MANIFEST} is not a JSON object")
    if data.get("format") == 1:
        raise EarlierScheduleError(
            f"checkpoint {directory} was written by an earlier mpi_teleport (checkpoint format "
            f"1) whose schedule (which node holds which token in each round) differs from this "
            f"version's, so this version cannot resume it: start afresh, or resume with the "
            f"version that wrote it")
    if data.get("format") != FORMAT:
        raise _damaged(directory, f"{MANIFEST} has format {data.get('format')!r}, this version "
                                  f"reads format {FORMAT}")
    for name, (kind, what) in _FIELDS.items():
        if name not in data:
            if name in ("round", "k", "n"):
                raise _damaged(directory, f"{MANIFEST} lacks {name!r}")
            continue
        value = data[name]
        ok = isinstance(value, kind) and not isinstance(value, bool)
        if ok and kind is int:
            ok = value >= (0 if name == "round" else 1)
        if ok and name == "layout":
            ok = value in (LAYOUT_TOKENS, LAYOUT_MATRIX)
        if ok and name == "arrays":
            ok = all(isinstance(a, str) and _NAME_RE.match(a) for a in value) and len(value) > 0
        if not ok:
            raise _damaged(directory, f"{MANIFEST} field {name!r} is {value!r}, not {what}")
    for name in ("recorder", "summary"):
        if data.get(name) is not None and not isinstance(data[name], dict):
            raise _damaged(directory, f"{MANIFEST} field {name!r} is not an object")
    wall = data.get("wall_s", 0.0)
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not 0 <= wall < float("inf"):
        raise _damaged(directory, f"{MANIFEST} field 'wall_s' is {str(wall)[:60]!r}, not a "
                                  f"number of seconds >= 0")
    _check_recorder(directory, data.get("recorder"))
    clocks = data.get("clocks_us")
    if clocks is not None and not (isinstance(clocks, list) and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) for c in clocks)):
        raise _damaged(directory, f"{MANIFEST} field 'clocks_us' is not a list of numbers")
    m = _ROUND_RE.match(Path(directory).name)
    if m and int(m.group(1)) != data["round"]:
        raise _damaged(directory, f"{MANIFEST} says round {data['round']} but the directory is "
                                  f"named for round {int(m.group(1))}")
    return data


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_recorder(directory, state) -> None:
    """The recorder's state (:meth:`mpi_teleport.runtime.metrics.Recorder.state`) has the types
    the recorder restores, so an edited manifest stops every process at start-up rather
    than one of them halfway through restoring."""
    if state is None:
        return
    checks = (
        ("records", lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v),
         "a list of objects"),
        ("rounds_to_target", lambda v: v is None or (_is_int(v) and v >= 0),
         "null or an integer >= 0"),
        ("last", lambda v: v is None or isinstance(v, dict), "null or an object"),
        ("rounds_run", lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
        ("elapsed", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
         and v == v and abs(v) != float("inf"), "a finite number"),
    )
    for name, ok, what in checks:
        if name not in state:
            raise _damaged(directory, f"{MANIFEST} field 'recorder' lacks {name!r}")
        if not ok(state[name]):
            raise _damaged(directory, f"{MANIFEST} field 'recorder.{name}' is "
                                      f"{str(state[name])[:60]!r}, not {what}")


_manifests: dict = {}  # (path, mtime, size) -> manifest: start-up reads each one once


def read_manifest(directory: Path, strict: bool = True) -> dict | None:
    """The manifest of a complete checkpoint, or None when ``directory`` has none (an
    incomplete checkpoint). A manifest that is there but unreadable or wrong raises
    :class:`DamagedCheckpointError` (``strict=False``: None, for pruning)."""
    path = Path(directory) / MANIFEST
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    key = (str(path), st.st_mtime_ns, st.st_size)
    try:
        if key not in _manifests:
            if st.st_size > MAX_MANIFEST:
                raise _damaged(directory, f"{MANIFEST} is {st.st_size} bytes, larger than any "
                                          f"this package writes")
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8")
                data = json.loads(text)
            except (OSError, ValueError, RecursionError) as exc:
                raise _damaged(directory, f"{MANIFEST} is not readable JSON "
                                          f"({type(exc).__name__})") from None
            _manifests[key] = check_manifest(directory, data)
        return _manifests[key]
    except DamagedCheckpointError:
        if strict:
            raise
        return None


MAX_MANIFEST = 256 << 20  # records of a very long run stay far below this


def _load_npy(path: Path, what: str, directory, mmap: bool = False) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise _damaged(directory, f"{what} cannot be read ({_reason(exc)})") from None
    if not isinstance(arr, np.ndarray):
        raise _damaged(directory, f"{what} is not a single array")
    return arr


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:160]


def _check_array(directory, what: str, arr, shape: tuple) -> None:
    if arr.dtype.hasobject or arr.dtype.kind not in "fiucb":
        raise _damaged(directory, f"{what} holds {arr.dtype} values, not numbers")
    if tuple(arr.shape) != shape:
        raise _damaged(directory, f"{what} has shape {tuple(arr.shape)}, expected {shape}")


def check_arrays(directory: Path, manifest: dict) -> None:
    """Read the header of every array file of a checkpoint (cheap: no data) and raise
    :class:`DamagedCheckpointError` for a file that is missing, empty, truncated, pickled,
    of objects or of the wrong shape. Run by every process before any communication."""
    import zipfile

    directory = Path(directory)
    k, dim = stored_tokens(manifest), manifest.get("dim")
    sized = ("x", "v")  # arrays of the model's length; buffers may be shaped otherwise
    slots = manifest.get("state_slots", 1)  # (v: Adam's two moments are 2 dim long)
    length = {"x": dim, "v": None if dim is None or not isinstance(slots, int) else dim * slots}
    if manifest.get("layout") == LAYOUT_MATRIX:
        for name in manifest.get("arrays", []):
            what = f"{name}.npy"
            arr = _load_npy(directory / what, what, directory, mmap=True)
            if name in sized and length[name] is not None:
                _check_array(directory, what, arr, (k, length[name]))
            elif arr.ndim < 1 or arr.shape[0] != k:
                raise _damaged(directory, f"{what} has shape {arr.shape}, expected {k} rows")
            else:
                _check_array(directory, what, arr, arr.shape)
        return
    for m in range(k):
        what = token_file(m)
        path = directory / what
        try:
            with zipfile.ZipFile(path) as z:
                members = {info.filename: info for info in z.infolist()}
                for name in manifest.get("arrays", []):
                    info = members.get(f"{name}.npy")
                    if info is None:
                        raise _damaged(directory, f"{what} lacks array {name!r}")
                    with z.open(info) as f:
                        version = np.lib.format.read_magic(f)
                        header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                  else np.lib.format.read_array_header_2_0)(f)
                        shape, _, dtype = header
                        if dtype.hasobject or dtype.kind not in "fiucb":
                            raise _damaged(directory, f"{what} holds {dtype} values in "
                                                      f"{name!r}, not numbers")
                        need = f.tell() + int(np.prod(shape)) * dtype.itemsize
                    if info.file_size != need:
                        raise _damaged(directory, f"{what}: array {name!r} is {info.file_size} "
                                                  f"bytes, its header promises {need}")
                    if name in sized and length[name] is not None and \
                            tuple(shape) != (length[name],):
                        raise _damaged(directory, f"{what} array {name!r} has shape "
                                                  f"{tuple(shape)}, expected ({length[name]},)")
        except DamagedCheckpointError:
            raise
        except FileNotFoundError:
            raise _damaged(directory, f"{what} is missing") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
            raise _damaged(directory, f"{what} cannot be read ({_reason(exc)})") from None


def load_token(directory: Path, manifest: dict, m: int) -> dict[str, np.ndarray]:
    """Token m's arrays from either layout (never unpickling anything)."""
    import zipfile

    directory = Path(directory)
    if manifest.get("layout") == LAYOUT_MATRIX:
        return {name: np.array(_load_npy(directory / f"{name}.npy", f"{name}.npy", directory,
                                         mmap=True)[m])
                for name in manifest["arrays"]}
    try:
        with np.load(directory / token_file(m), allow_pickle=False) as data:
            out = {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise _damaged(directory, f"{token_file(m)} cannot be read ({_reason(exc)})") from None
    for name, arr in out.items():
        if arr.dtype.hasobject:
            raise _damaged(directory, f"{token_file(m)} holds objects in {name!r}")
    return out


def stored_tokens(manifest: dict) -> int:
    """How many token rows a checkpoint holds: k, or fewer for an elastic DSGD run that
    dropped the replicas of lost nodes (``tokens``, mpi_teleport/DESIGN.md §11)."""
    return int(manifest.get("tokens", manifest["k"]))


def load_matrix(directory: Path, manifest: dict) -> dict[str, np.ndarray]:
    """All tokens' arrays as (k, d) matrices, from either layout."""
    directory = Path(directory)
    if manifest.get("layout") == LAYOUT_MATRIX:
        return {name: _load_npy(directory / f"{name}.npy", f"{name}.npy", directory)
                for name in manifest["arrays"]}
    rows = [load_token(directory, manifest, m) for m in range(stored_tokens(manifest))]
    try:
        return {name: np.stack([row[name] for row in rows]) for name in manifest["arrays"]}
    except (KeyError, ValueError) as exc:
        raise _damaged(directory, f"the token files disagree ({_reason(exc)})") from None
