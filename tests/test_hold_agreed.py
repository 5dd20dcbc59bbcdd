"""One lock and start-up agreement for every entry point (runner.hold_agreed): the MPI
command line (run.py) and the API both lock through it, so a directory another job holds
is the same one line on every rank, none waits, and nothing stays locked. In-process:
ranks are threads with an allgather between them (no MPI)."""
from __future__ import annotations

import inspect
import threading

import pytest

from mpi_teleport.runtime import collective
from mpi_teleport.disk import lock
from mpi_teleport import run, sim
from mpi_teleport.session import runner
from mpi_teleport.errors import UsageError
from helpers import ThreadAllgather


def _on_ranks(n: int, body):
    hub, results = ThreadAllgather(n), {}

    def rank(r):
        try:
            results[r] = body(hub.rank(r), r)
        except UsageError as exc:
            results[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == n
    return results


def test_a_held_directory_is_one_agreed_line_on_every_rank(tmp_path):
    held = lock.acquire(tmp_path / "out", "--out")  # "another job"
    try:
        results = _on_ranks(3, lambda tr, r: runner.hold_agreed([(tmp_path / "out", "--out")],
                                                                tr, r == 0))
    finally:
        held.release()
    messages = {str(e) for e in results.values()}
    assert len(messages) == 1 and "is already held by this process" in messages.pop()
    assert all(isinstance(e, UsageError) and collective.is_agreed(e) for e in results.values())


def test_the_root_locks_and_releases(tmp_path):
    results = _on_ranks(2, lambda tr, r: runner.hold_agreed([(tmp_path / "out", "--out")],
                                                            tr, r == 0))
    assert results[1] is None and callable(results[0])
    with pytest.raises(lock.LockError):  # held by the root now
        lock.acquire(tmp_path / "out", "--out")
    results[0]()
    lock.acquire(tmp_path / "out", "--out").release()


def test_the_command_lines_lock_through_the_same_function():
    for main in (run.main, sim.main):
        source = inspect.getsource(main)
        assert "runner.hold_agreed(" in source and "hold_dirs(" not in source
    source = inspect.getsource(run.main)
    assert "agree_on_error" not in source  # (start-up: cli.agree_on_config, then the locks)
