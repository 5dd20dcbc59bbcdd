"""File locks: one run per directory, and one process at a time unpacking a data set.

**A run directory** (``--out``, ``--checkpoint-dir``) is held by one process at a time:
:func:`acquire` takes an exclusive ``flock`` on ``<dir>/.mpi_teleport-run.lock`` and
writes who holds it (host, pid, start time, command) into that file; :meth:`RunLock.release`
(or leaving the ``with`` block, or the end of the process) deletes the file and drops the
lock. A second process asking for the same directory gets :class:`LockedError`, one line
naming the holder. Under MPI only rank 0 calls it: the lock belongs to one process.

Why ``flock`` and a record both: the kernel grants ``flock`` atomically and drops it when
the holder dies (even by SIGKILL), so on one host a record left behind by a dead run is
recognised as stale and taken over without asking anyone. A record from *another* host
with the ``flock`` granted is ambiguous (some shared file systems do not carry ``flock``
between hosts): it is refused, and the message says which file to delete if that job is
surely gone. Where the file system has no ``flock`` at all, the record alone decides
(same host: is the pid alive?), which leaves a tiny window for two runs started at the
same instant.

**Unpacking a data set** (:func:`exclusive`): a blocking ``flock`` on a lock file in the
data directory, so that of several ranks on a node one decompresses while the others wait,
then find the work done.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time

__all__ = ["RUN_LOCK", "LockError", "LockedError", "RunLock", "acquire", "exclusive", "holder"]

RUN_LOCK = ".mpi_teleport-run.lock"
# errno values meaning "this file system does not do flock" (Lustre without -o flock, some NFS)
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class LockError(ValueError):
    """A directory cannot be locked (message: one line saying why and what to do)."""


class LockedError(LockError):
    """Another process holds the directory (message: one line naming the holder)."""


class RunLock:
    """A held run-directory lock; :meth:`release` is idempotent (also a context manager)."""

    _fd: int | None  # None once released

    def __init__(self, path: str, fd: int):
        self.path, self._fd, self._pid = path, fd, os.getpid()
        atexit.register(self.release)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        # A forked child (a data loader worker, say) inherits the object but must not free
        # its parent's lock.
        if self._fd is None or os.getpid() != self._pid:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still locked: nobody can be holding it meanwhile
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = None
        atexit.unregister(self.release)

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _record() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(sys.argv)[:300]}


def holder(path: str) -> dict | None:
    """The record in a lock file, or None when it is absent, empty or unreadable."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(4096).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _describe(info: dict | None) -> str:
    if not info:
        return "a process that has not written its name yet"
    cmd = f" ({info['command']})" if info.get("command") else ""
    return (f"pid {info.get('pid', '?')} on host {info.get('host', '?')} since "
            f"{info.get('started', '?')}{cmd}")


def _is_this_process(info: dict | None) -> bool:
    return bool(info and info.get("host") == socket.gethostname() and info.get("pid") == os.getpid())


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True  # exists but not ours, or unreadable: assume alive
    return True


def acquire(directory, what: str = "run directory") -> RunLock:
    """Lock ``directory`` (created if needed) for this process, or raise :class:`LockedError`
    naming the holder; :class:`LockError` when the directory cannot hold a lock file.
    ``what`` names the directory in messages (``--out``, ``--checkpoint-dir``)."""
    directory = os.path.abspath(os.fspath(directory))
    path = os.path.join(directory, RUN_LOCK)
    try:
        os.makedirs(directory, exist_ok=True)
    except (OSError, ValueError) as exc:
        raise LockError(f"{what} {directory}: cannot create the directory "
                        f"({exc.strerror if isinstance(exc, OSError) else exc}); choose another") from None
    for _ in range(100):  # retried only while other processes release or take over meanwhile
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LockError(f"{what} {directory}: cannot create the lock file {path} "
                            f"({exc.strerror}); choose a writable directory") from None
        try:
            got = _try_lock(fd, path, what, directory)
        except BaseException:
            os.close(fd)
            raise
        if got is None:  # the file we locked was deleted by its releasing holder: again
            os.close(fd)
            continue
        return RunLock(path, fd)
    raise LockError(f"{what} {directory}: the lock file {path} keeps changing; try again")


def _try_lock(fd: int, path: str, what: str, directory: str):
    """True when ``fd`` now holds the lock; None when the file was replaced (retry)."""
    flocked = True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        info = holder(path)
        if _is_this_process(info):  # never blame the caller's own pid as "another job"
            raise LockedError(f"{what} {directory} is already held by this process (pid "
                              f"{os.getpid()}) for another run that has not ended; a directory "
                              f"serves one run at a time: let that run end first or choose "
                              f"another {what}") from None
        raise LockedError(f"{what} {directory} is in use by {_describe(info)}: wait for "
                          f"that run to end or choose another {what}") from None
    except OSError as exc:
        if exc.errno not in _NO_FLOCK:
            raise LockError(f"{what} {directory}: cannot lock {path} ({exc.strerror})") from None
        flocked = False
    try:
        same_file = os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        same_file = False
    if not same_file:
        return None
    info = holder(path)
    if info:  # a previous holder did not release: is it gone?
        if info.get("host") != socket.gethostname():
            raise LockedError(
                f"{what} {directory} is marked in use by {_describe(info)}: if that job is surely "
                f"gone, delete {path} and start again")
        if not flocked and _alive(info.get("pid")):
            raise LockedError(f"{what} {directory} is in use by {_describe(info)}: wait for "
                              f"that run to end or choose another {what}")
        # same host and the holder is dead (with flock: the kernel dropped its lock with
        # it): a stale record, taken over
    data = json.dumps(_record()).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
    except OSError as exc:
        raise LockError(f"{what} {directory}: cannot write the lock file {path} ({exc.strerror})") from None
    return True


@contextlib.contextmanager
def exclusive(path):
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the block, waiting for
    other holders; without ``flock`` support the block runs unlocked (callers write through
    temporary names and ``os.replace``, so the result stays whole). The file stays."""
    fd = os.open(os.fspath(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                raise
        yield
    finally:
        os.close(fd)
