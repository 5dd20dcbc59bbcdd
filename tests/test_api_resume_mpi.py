"""API resume under mpirun from a damaged checkpoint: every rank checks every file before
anyone starts, so every rank ends with the same one line (no rank waits for another)."""
from __future__ import annotations

from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "api_resume.py")


@pytest.mark.one_mpi
def test_an_api_resume_from_a_truncated_token_file_ends_every_rank_alike(tmp_path, mpirun):
    run = tmp_path / "run"
    proc = mpirun(2, [SCRIPT, "write", str(run)], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    newest = sorted((run / "checkpoints").glob("round-*"))[-1]
    token = newest / "token-000001.npz"
    token.write_bytes(token.read_bytes()[:40])  # truncated: only its holder would notice late
    proc = mpirun(2, [SCRIPT, "resume", str(run)], timeout=120)
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(lines) == 2 and "Traceback" not in proc.stderr
    messages = {line.split(": ", 1)[1] for line in lines}
    assert len(messages) == 1
    assert "token-000001.npz cannot be read" in messages.pop()
