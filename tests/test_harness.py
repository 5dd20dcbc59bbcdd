"""The harness's own promise: an MPI test ends instead of hanging. A launcher that outlives
every rank (Open MPI 5's PRRTE issue 1839) is told apart from a deadlock within seconds
(conftest.communicate), so it is reported for what it is and costs no test its timeout."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import LauncherOutlivedRanks, communicate
from launch_helpers import TAG, kill_tagged, new_tag


def _job(tag: str, script: str) -> subprocess.Popen:
    """A stand-in for mpirun: a shell (not Python) that starts one Python 'rank'."""
    return subprocess.Popen(["bash", "-c", script.replace("PY", sys.executable)],
                            env={TAG: tag, "PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_launcher_that_outlives_its_ranks_is_told_apart_within_the_grace():
    tag = new_tag()
    proc = _job(tag, "PY -c 'import time; time.sleep(1)'; echo ranks-done >&2; sleep 60")
    start = time.monotonic()
    with pytest.raises(LauncherOutlivedRanks, match="1839") as hung:
        communicate(proc, tag, timeout=50, grace=1.0)
    assert time.monotonic() - start < 20 and proc.poll() is not None
    assert "ranks-done" in hung.value.err


def test_a_rank_still_running_is_a_timeout_not_a_launcher_hang():
    tag = new_tag()
    proc = _job(tag, "PY -c 'import time; time.sleep(60)'")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            communicate(proc, tag, timeout=3, grace=0.5)
    finally:
        kill_tagged(tag)
        proc.wait()


def test_a_launcher_that_returns_gives_its_output():
    tag = new_tag()
    out, err = communicate(_job(tag, "PY -c 'print(7)'; echo done >&2"), tag, timeout=30,
                           grace=0.5)
    assert out.strip() == "7" and err.strip() == "done"


def test_the_suite_removes_the_mpi_segments_its_killed_jobs_left(tmp_path):
    """conftest's end-of-session sweep of /dev/shm: only MPI segments made during the
    session that no process maps or holds open; an older one, a live one and any other
    file stay."""
    import os

    from conftest import leftover_segments, segments_in_use

    old, dead, live, other = (tmp_path / name for name in (
        "sm_segment.old.0", "mpich_shm_dead_0", "sm_segment.live.0", "notes.txt"))
    for path in (old, dead, live, other):
        path.write_bytes(b"\0" * 16)
    os.utime(old, (1000.0, 1000.0))
    since = time.time() - 60
    assert leftover_segments(since, tmp_path, {str(live)}) == [dead]
    with open(live, "rb"):  # (held open by this process: in use)
        assert str(live) in segments_in_use(tmp_path)


def test_the_sweep_spares_a_segment_a_starting_job_has_not_mapped_yet(tmp_path, monkeypatch):
    """A job that is starting makes its segment before mapping it (Open MPI) or before its
    other ranks open it (MPICH): the sweep removes only segments unchanged for its settling
    time, and a pytest that is a rank of an MPI job (tests/test_in_rank.py's) is not the
    suite's session and sweeps nothing."""
    import os

    from conftest import inside_mpi_job, sweep_leftover_segments

    fresh, dead, live = (tmp_path / name for name in ("sm_segment.fresh.0", "mpich_shm_dead", "sm_segment.live.0"))
    for path in (fresh, dead, live):
        path.write_bytes(b"\0" * 16)
    for path in (dead, live):
        os.utime(path, (time.time() - 120, time.time() - 120))
    with open(live, "rb"):
        assert sweep_leftover_segments(time.time() - 3600, tmp_path, settle=30) == [dead]
    assert fresh.exists() and live.exists() and not dead.exists()
    for name in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert not inside_mpi_job()
    monkeypatch.setenv("PMI_RANK", "0")
    assert inside_mpi_job()
