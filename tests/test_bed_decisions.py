"""Issue 50, class 9: the test beds decide once and wait for what they need, checked without
starting them (fakes for apt-get and for the start itself).

* jobs/local-cluster.sh waits for another apt/dpkg: `apt-get update` fails at once while
  another holds the package lists' lock (it does not honour DPkg::Lock::Timeout), so the
  script tries again until its wait (LOCAL_SLURM_APT_WAIT) is over, saying so once.
* Whether the local SLURM is up is decided once per run (tests/test_jobs_slurm.slurm_env):
  a start that failed is not tried again by a later test (no run both skips and runs SLURM
  tests), and SLURM lost after it was found up fails, saying so.
* Cancelling a job never errors on its `sbatch --wait` being slow to notice.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

import test_jobs_slurm as slurm
from helpers import ROOT

FAKE_APT = """#!/usr/bin/env bash
n=$(cat "$COUNT" 2>/dev/null || echo 0); echo $((n + 1)) > "$COUNT"
echo "apt-get $*" >> "$CALLS"
if (( n < FAILS )); then
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
    echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
    exit 100
fi
echo done
"""


def apt_get(tmp_path, fails: int, wait: int) -> subprocess.CompletedProcess:
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "apt-get"
    fake.write_text(FAKE_APT)
    fake.chmod(0o755)
    script = (f'source {ROOT}/jobs/local-cluster.sh; DIR={tmp_path}; APT_WAIT={wait}; sleep() {{ :; }}; '
              'apt_get update -qq')
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "COUNT": str(tmp_path / "count"),
           "CALLS": str(tmp_path / "calls"), "FAILS": str(fails)}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)


def test_local_cluster_waits_while_another_apt_holds_the_lock(tmp_path):
    proc = apt_get(tmp_path, fails=3, wait=600)
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4 and all("-o DPkg::Lock::Timeout=" in c and c.endswith("update -qq") for c in calls)
    assert proc.stderr.splitlines() == [
        "[local-cluster] waiting up to 600s for another apt/dpkg: E: Could not get lock "
        "/var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"]
    assert (tmp_path / "apt.log").read_text().count("Could not get lock") == 3


def test_local_cluster_gives_up_after_its_wait_with_apts_status(tmp_path):
    proc = apt_get(tmp_path, fails=10**6, wait=0)  # (no wait left: apt-get's own failure)
    assert proc.returncode == 100
    assert len((tmp_path / "calls").read_text().splitlines()) == 1


def test_apt_failing_otherwise_is_not_retried(tmp_path):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "apt-get"
    fake.write_text('#!/bin/sh\necho "apt-get $*" >> "$CALLS"\necho "E: Unable to locate package slurmd" >&2\nexit 100\n')
    fake.chmod(0o755)
    proc = subprocess.run(["bash", "-c", f"source {ROOT}/jobs/local-cluster.sh; DIR={tmp_path}; apt_get install x"],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls")})
    assert proc.returncode == 100 and len((tmp_path / "calls").read_text().splitlines()) == 1


def decided(monkeypatch, tmp_path, starts):
    """slurm_env with the run's folder in tmp_path and _start_slurm answering `starts` in turn."""
    monkeypatch.setattr(slurm, "early_dir", lambda config: tmp_path)
    answers = iter(starts)
    calls = []

    def start():
        calls.append(1)
        answer = next(answers)
        if isinstance(answer, str):
            pytest.skip(answer)
        return {"env": answer}

    monkeypatch.setattr(slurm, "_start_slurm", start)
    return calls


def test_slurm_not_up_is_decided_once_per_run(monkeypatch, tmp_path):
    calls = decided(monkeypatch, tmp_path, ["local SLURM could not start: apt-get failed (rc=100)",
                                            {"SLURM_CONF": "/x"}])
    for _ in range(3):  # the first test's start failed; a later start would work: never tried
        with pytest.raises(pytest.skip.Exception, match="apt-get failed"):
            slurm.slurm_env(None)
    assert len(calls) == 1


def test_slurm_found_up_then_lost_fails_saying_so(monkeypatch, tmp_path):
    calls = decided(monkeypatch, tmp_path, [{"SLURM_CONF": "/x"}, {"SLURM_CONF": "/x"}, "it died"])
    assert slurm.slurm_env(None) == {"SLURM_CONF": "/x"}
    assert slurm.slurm_env(None) == {"SLURM_CONF": "/x"}  # (another test: up, env again)
    with pytest.raises(pytest.fail.Exception, match="was up earlier in this run and is not now: it died"):
        slurm.slurm_env(None)
    assert len(calls) == 3


def test_cancel_ends_a_slow_sbatch_wait_without_an_error(monkeypatch, tmp_path):
    job = slurm.Job.adopt("x", tmp_path, {})
    job.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    monkeypatch.setattr(slurm.Job, "CANCEL_WAIT_S", 0.5)
    (tmp_path / "sbatch.stdout").write_text("")  # (no job id: nothing to scancel)
    job.cancel()
    assert job.proc.poll() is not None
