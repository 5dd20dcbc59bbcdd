"""The run-directory lock (mpi_teleport.disk.lock): one process per directory, the holder named,
stale locks taken over, released on exit."""
from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys

import pytest

from mpi_teleport.disk import lock
from mpi_teleport.disk.lock import RUN_LOCK, LockedError, LockError, acquire
from helpers import ROOT

HOLD = ("import sys, time; from mpi_teleport.disk import lock; "
        "h = lock.acquire(sys.argv[1], '--out'); print('held', flush=True); time.sleep(600)")


def _holder_process(directory) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_second_process_is_refused_with_the_holder_named(tmp_path):
    proc = _holder_process(tmp_path / "run")
    try:
        with pytest.raises(LockedError) as e:
            acquire(tmp_path / "run", "--out")
        msg = str(e.value)
        assert "\n" not in msg and isinstance(e.value, ValueError)
        assert f"pid {proc.pid}" in msg and socket.gethostname() in msg and "since " in msg
        assert msg.startswith(f"--out {tmp_path / 'run'} is in use by")
        assert "choose another --out" in msg
    finally:
        proc.kill()
        proc.wait()
    # the holder died (SIGKILL: no release): its record is stale and taken over
    with acquire(tmp_path / "run", "--out") as held:
        assert lock.holder(held.path)["pid"] == os.getpid()
    assert not (tmp_path / "run" / RUN_LOCK).exists()


def test_release_and_reacquire(tmp_path):
    first = acquire(tmp_path / "a")  # creates the directory
    path = tmp_path / "a" / RUN_LOCK
    info = json.loads(path.read_text())
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    assert {"started", "command"} <= set(info)
    with pytest.raises(LockedError):  # a second handle in the same process is refused too
        acquire(tmp_path / "a")
    first.release()
    first.release()  # idempotent
    assert not path.exists() and not first.held
    second = acquire(tmp_path / "a")
    assert path.exists()
    second.release()


def test_released_at_process_exit(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from mpi_teleport.disk import lock; lock.acquire(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env, cwd=ROOT,
                   timeout=60)
    assert not (tmp_path / RUN_LOCK).exists()


def test_stale_record_of_a_dead_pid_is_taken_over(tmp_path):
    (tmp_path / RUN_LOCK).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": _dead_pid(), "started": "2020-01-01T00:00:00Z"}))
    with acquire(tmp_path) as held:
        assert lock.holder(held.path)["pid"] == os.getpid()


def test_garbage_lock_file_is_taken_over(tmp_path):
    (tmp_path / RUN_LOCK).write_bytes(b"\xff\x00 not json")
    with acquire(tmp_path):
        pass


def test_record_from_another_host_is_refused_with_the_remedy(tmp_path):
    path = tmp_path / RUN_LOCK
    path.write_text(json.dumps({"host": "node-elsewhere-17", "pid": 4242,
                                "started": "2026-01-01T00:00:00Z", "command": "x"}))
    with pytest.raises(LockedError) as e:
        acquire(tmp_path, "--checkpoint-dir")
    msg = str(e.value)
    assert "pid 4242 on host node-elsewhere-17" in msg and f"delete {path}" in msg
    assert "\n" not in msg and path.exists()


def test_many_processes_at_once_exactly_one_holds(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import sys; from mpi_teleport.disk import lock\n"
            "try:\n    h = lock.acquire(sys.argv[1])\nexcept lock.LockedError:\n    print('refused')\n"
            "else:\n    print('held', flush=True); sys.stdin.read()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "r")], env=env, cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    try:
        answers = [p.stdout.readline().strip() for p in procs]  # the holder holds meanwhile
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    assert sorted(answers) == ["held"] + ["refused"] * 5


def test_without_flock_the_record_decides(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock.fcntl, "flock", no_flock)
    path = tmp_path / RUN_LOCK
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getppid(),
                                "started": "2026-01-01T00:00:00Z"}))
    with pytest.raises(LockedError, match=f"in use by pid {os.getppid()}"):
        acquire(tmp_path)
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid()}))
    with acquire(tmp_path) as held:
        assert lock.holder(held.path)["pid"] == os.getpid()


@pytest.mark.parametrize("bad", ["file", "nul"])
def test_unusable_directory_is_one_line(tmp_path, bad):
    if bad == "file":
        (tmp_path / "f").write_text("x")
        target, fragment = tmp_path / "f" / "run", "cannot create the directory"
    else:
        target, fragment = str(tmp_path) + "/a\0b", "cannot create the directory"
    with pytest.raises(LockError) as e:
        acquire(target, "--out")
    assert fragment in str(e.value) and "\n" not in str(e.value)
    assert not isinstance(e.value, LockedError)


def test_forked_child_does_not_release_its_parents_lock(tmp_path):
    held = acquire(tmp_path)
    pid = os.fork()
    if pid == 0:  # child: an inherited handle must not free the parent's lock
        held.release()
        os._exit(0)
    os.waitpid(pid, 0)
    assert (tmp_path / RUN_LOCK).exists() and held.held
    with pytest.raises(LockedError):
        acquire(tmp_path)
    held.release()
