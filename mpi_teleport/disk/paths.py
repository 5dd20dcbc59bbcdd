"""Where a run writes, and holding it: path settings the system can take, made absolute,
checked writable, and locked for the run's duration (one job per directory).

Shared by the command line and the Python API: both name their paths through
:func:`check_path` and lock them through :func:`hold_dirs`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..errors import UsageError

_NAME_MAX, _PATH_MAX = 255, 4095  # Linux limits of one name and of a whole path, in bytes
_PATH_FLAGS = ("out", "checkpoint_dir", "resume")


def show(path) -> str:
    """A path as a message may quote it: printable, and short."""
    text = repr(str(path))[1:-1] if not str(path).isprintable() else str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(str(path))} characters)"


def _flag(name: str, naming=None) -> str:
    return naming.name(name) if naming is not None else "--" + name.replace("_", "-")


def check_path(flag: str, value, naming=None) -> str:
    """A path setting that the operating system can take (not empty, no NUL byte, names
    within the length limits), or UsageError saying which. ``naming``: how the message
    spells the setting (default: the command line's flag)."""
    text = str(value)
    if not text:
        raise UsageError(f"{_flag(flag, naming)} is empty; give a directory")
    if "\0" in text:
        raise UsageError(f"{_flag(flag, naming)} {show(text)}: contains a NUL byte; give a plain path")
    encoded = os.fsencode(text)
    if len(encoded) > _PATH_MAX:
        raise UsageError(f"{_flag(flag, naming)} {show(text)}: the path is {len(encoded)} bytes, "
                         f"longer than the {_PATH_MAX} a path may have; choose a shorter one")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > _NAME_MAX:
        raise UsageError(f"{_flag(flag, naming)} {show(text)}: a name in it is {len(longest)} "
                         f"bytes, longer than the {_NAME_MAX} a file name may have; choose a "
                         f"shorter one")
    return text


def absolute(name: str, value, naming=None) -> str:
    """One path setting resolved against the working directory (``~`` expanded), so
    config.json and every manifest store where the files really are."""
    text = check_path(name, value, naming)
    try:
        expanded = os.path.expanduser(text)
    except (RuntimeError, KeyError):
        expanded = text
    if text.startswith("~") and expanded == text:  # ~nosuchuser: not a literal name
        raise UsageError(f"{_flag(name, naming)} {show(text)}: cannot expand "
                         f"{text.split('/')[0]} (no such user); give the path")
    return os.path.abspath(expanded)


def absolute_paths(raw: dict) -> dict:
    """``--out``, ``--checkpoint-dir`` and ``--resume`` made absolute (:func:`absolute`)."""
    raw = dict(raw)
    for name in _PATH_FLAGS:
        if raw.get(name) is not None:
            raw[name] = absolute(name, raw[name])
    return raw


def check_writable(flag: str, path: Path) -> None:
    """``path`` is a directory this process can create or write into, or UsageError.
    ``flag``: the setting as a message spells it (``--out``, ``out``)."""
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


def distinct_dirs(dirs) -> list[tuple[Path, str]]:
    """(path, name) pairs with each directory once, under the first name it came with: one
    directory may serve as both ``out`` and ``checkpoint_dir``, and a run must not lock
    it twice (a second ``flock`` on another descriptor would be refused, naming the run's
    own pid as the holder)."""
    unique, seen = [], set()
    for path, what in dirs:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append((path, what))
    return unique


def hold_dirs(dirs) -> Callable[[], None]:
    """Lock each (path, flag) of ``dirs`` for this process (the simulator, or the root under
    MPI; :func:`mpi_teleport.session.runner.hold_agreed` calls it for every entry point);
    returns a callable that releases them. A directory another job holds, or that cannot
    hold a lock file, is a UsageError naming the holder or the reason."""
    from . import lock

    held: list = []  # lock.RunLock

    def release():
        while held:
            held.pop().release()

    try:
        for path, what in distinct_dirs(dirs):
            held.append(lock.acquire(path, what))
    except lock.LockError as exc:
        release()
        raise UsageError(str(exc)) from None
    return release
