"""jobs/figure3.sbatch without SLURM (`QUICK=1 bash jobs/figure3.sbatch`, as its header
says): the step-size schedule it is given reaches every run, and a schedule it does not
know is one line, status 2, before anything is written. (Under SLURM the quick job runs in
tests/test_jobs_slurm.py.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import ROOT
from launch_helpers import kill_tagged, new_tag, this_venv_impl

pytestmark = pytest.mark.timeout(300)


def run_job(env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    """The job script under bash, this venv's Python and MPI; its ranks killed on a hang."""
    tag = new_tag()
    job_env = this_venv_impl().env({**os.environ, "PYTHON": sys.executable, **env}, tag)
    for name in ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_ARRAY_TASK_ID", "MPI_LAUNCHER"):
        job_env.pop(name, None)  # (the quick job of this machine, not a surrounding allocation)
    proc = subprocess.Popen(["bash", str(ROOT / "jobs" / "figure3.sbatch")], cwd=ROOT,
                            env=job_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tagged(tag)
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"jobs/figure3.sbatch hung for {timeout:.0f} s\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_an_unknown_schedule_is_one_line_before_anything_is_written(tmp_path):
    done = run_job({"QUICK": "1", "LR_SCHEDULE": "cosinus", "OUT_DIR": str(tmp_path / "out")},
                   timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert lines == ["figure3: LR_SCHEDULE must be constant, cosine or cosine-warmup, got 'cosinus'"]
    assert not (tmp_path / "out").exists()


def test_the_schedule_given_reaches_every_run(tmp_path):
    """QUICK mode (digits, 4 ranks, Teleportation and DSGD ring in one launch) with the
    authors' schedule: every run records it, and the job ends with its figure."""
    out = tmp_path / "out"
    done = run_job({"QUICK": "1", "LR_SCHEDULE": "cosine-warmup", "OUT_DIR": str(out)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    configs = sorted(out.rglob("config.json"))
    assert [c.parent.name for c in configs] == ["dsgd", "teleportation"], configs
    for config in configs:
        assert json.loads(config.read_text())["lr_schedule"] == "cosine-warmup", config
    assert (out / "figure3.png").is_file()
    assert "--lr-schedule cosine-warmup" in done.stdout  # (the job's 'start' line)
