"""The API under mpirun refuses bad input alike on every rank: a resume from a damaged
checkpoint (every rank checks every file before anyone starts), a fresh run into another
run's checkpoints, a wrong type. Every rank ends with the same one line; none waits."""
from __future__ import annotations

from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "api_resume.py")


@pytest.mark.one_mpi
def test_api_refusals_under_mpirun_end_every_rank_alike(tmp_path, mpirun):
    run = tmp_path / "run"
    proc = mpirun(2, [SCRIPT, "write", str(run)], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    newest = sorted((run / "checkpoints").glob("round-*"))[-1]
    token = newest / "token-000001.npz"
    token.write_bytes(token.read_bytes()[:40])  # truncated: only its holder would notice late
    for mode, says in (("resume", "token-000001.npz cannot be read"),
                       ("fresh", "already holds checkpoints of a run"),
                       ("bad", "momentum: expected a number, got '0.9'")):
        proc = mpirun(2, [SCRIPT, mode, str(run)], timeout=120)
        lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
        assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert len(lines) == 2 and "Traceback" not in proc.stderr, (mode, proc.stderr[-2000:])
        messages = {line.split(": ", 1)[1] for line in lines}
        assert len(messages) == 1, messages
        assert says in messages.pop()


def test_one_directory_for_both_and_checkpoints_kept_apart_under_mpirun(tmp_path, mpirun):
    """Issue 31: out == checkpoint_dir was refused naming the run's own pid (class 6); a
    resume of checkpoints kept apart wrote its new ones into out/checkpoints (class 7)."""
    from mpi_teleport import checkpoint

    proc = mpirun(3, [SCRIPT, "places", str(tmp_path)], timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert checkpoint.newest(tmp_path / "both")[1]["round"] == 8
    assert checkpoint.newest(tmp_path / "ck")[1]["round"] == 8
    assert not (tmp_path / "files" / "checkpoints").exists()
