"""Signals around the shutdown and the set-up (mpi_teleport/signals.py, Terminator.commit;
checkpoint/keeper.py, Keeper.gate): once the processes agreed to stop, a second SIGTERM
(srun sends them ~50 ms apart at a time limit) or SIGINT changes nothing: exit 75 with
the checkpoint; a signal while a slow ``--problem module:function`` factory builds stops
the run as soon as the factory returns; a factory calling sys.exit(0) is one line, exit 2.
Simulator and MPI; every process runs under a hard timeout."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpi_teleport import checkpoint

from launch_helpers import this_venv_impl
from test_failures import finish, kill_job, rank_pids, start_mpi, wait_for

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
# A long run whose tokens take a while to write (2 x 16 MB): the second signal lands
# while the final checkpoint is written or the process exits.
LONG = ["--nodes", "2", "--k", "2", "--algorithm", "teleportation", "--rounds", "100000000",
        "--log-every", "5", "--checkpoint-every", "100000000", "--dim", "2000000",
        "--progress", "off"]


def _env():
    return dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{SCRIPTS}", OMP_NUM_THREADS="1")


def _start_sim(args, tmp_path, slow_exit=False) -> subprocess.Popen:
    head = [str(SCRIPTS / "slow_exit.py")] if slow_exit else ["-m"]
    return subprocess.Popen([sys.executable, *head, "mpi_teleport.sim", *args], cwd=tmp_path,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(proc, timeout=90) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running {timeout}s after the signal:\n{err[-2000:]}")
    return proc.returncode, err


def _signal_twice(pids, gap=0.05, sig=signal.SIGTERM, second=signal.SIGTERM):
    for pid in pids:
        os.kill(pid, sig)
    time.sleep(gap)
    for pid in pids:
        try:
            os.kill(pid, second)
        except ProcessLookupError:
            pass


def _assert_checkpointed(status, err, out):
    assert status == 75, err[-2000:]
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "stopped by SIGTERM" in line]
    path, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal"


# ----------------------------------------------------------------------------- simulator
def test_two_sigterms_50ms_apart_exit_75_simulator(tmp_path):
    for trial in range(2):
        out = tmp_path / f"run{trial}"
        proc = _start_sim([*LONG, "--out", str(out)], tmp_path, slow_exit=trial == 1)
        try:
            wait_for(out / "metrics.jsonl", timeout=120)
            _signal_twice([proc.pid])
            status, err = _wait(proc)
        finally:
            proc.kill()
        _assert_checkpointed(status, err, out)


@pytest.mark.parametrize("late", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_exiting_after_the_checkpoint_keeps_75(tmp_path, late):
    """The process lingers 2 s after main() returned: the late signal lands then (before:
    the default handler was back, and the status became 143 or 130)."""
    out = tmp_path / "run"
    proc = _start_sim([*LONG, "--dim", "50", "--out", str(out)], tmp_path, slow_exit=True)
    try:
        wait_for(out / "metrics.jsonl", timeout=120)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while checkpoint.locate(out) is None or (
                checkpoint.locate(out)[1].get("reason") != "signal"):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.5)  # main() has returned; the interpreter is exiting
        proc.send_signal(late)
        status, err = _wait(proc)
    finally:
        proc.kill()
    _assert_checkpointed(status, err, out)


def test_sigterm_while_a_slow_factory_builds_stops_when_it_returns(tmp_path):
    proc = _start_sim(["--problem", "factories:slow", "--nodes", "4", "--k", "2",
                       "--algorithm", "teleportation", "--rounds", "100000000",
                       "--log-every", "10000000", "--progress", "off"], tmp_path)
    try:
        time.sleep(2)  # inside the factory's 4 s
        proc.send_signal(signal.SIGTERM)
        status, err = _wait(proc, timeout=60)
    finally:
        proc.kill()
    assert status == 128 + signal.SIGTERM, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "stopped by SIGTERM before round 0" in lines[0], err


def test_a_factory_calling_sys_exit_is_one_line_exit_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mpi_teleport.sim", "--problem",
                          "factories:exits", "--nodes", "4", "--k", "2", "--rounds", "5"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "factories:exits" in lines[0] and "sys.exit(0)" in lines[0]


# ----------------------------------------------------------------------------- MPI
def test_two_sigterms_50ms_apart_exit_75_mpi(tmp_path):
    impl = this_venv_impl()
    for trial in range(2):
        out = tmp_path / f"run{trial}"
        trial_dir = tmp_path / f"t{trial}"
        trial_dir.mkdir()
        head = [str(SCRIPTS / "slow_exit.py")] if trial == 1 else ["-m"]
        proc = start_mpi(2, [*head, "mpi_teleport.run", *LONG[2:], "--out", str(out)],
                         trial_dir, impl)
        try:
            wait_for(out / "metrics.jsonl", timeout=120)
            _signal_twice(rank_pids(proc, 2))
            status, err = finish(proc, trial_dir, timeout=120)
        finally:
            kill_job(proc)
        _assert_checkpointed(status, err, out)


def test_sigterm_while_a_slow_factory_builds_stops_every_rank_mpi(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])  # the factory's module
    proc = start_mpi(2, ["-m", "mpi_teleport.run", "--problem", "factories:slow",
                         "--k", "2", "--algorithm", "teleportation", "--rounds", "100000000",
                         "--log-every", "10000000", "--progress", "off"], tmp_path,
                     this_venv_impl())
    try:
        pids = rank_pids(proc, 2)
        time.sleep(2)  # inside the factory's 4 s
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        status, err = finish(proc, tmp_path, timeout=60)
    finally:
        kill_job(proc)
    assert status != 0 and "stopped by SIGTERM before round 0" in err, err[-2000:]
    assert "Traceback" not in err


# Issue 31, class 1: two SIGTERMs 50 ms apart to *one* rank of a 4-rank job with a small
# checkpoint. The stop is agreed, written and the ranks finalise within those 50 ms, so the
# second signal lands inside MPI_Finalize, which mpi4py runs after the interpreter put its
# Python handlers back to the default: that rank died of SIGTERM and mpirun reported 143
# (4 of 4 trials before the fix: the handlers are now SIG_IGN once the stop is decided).
@pytest.mark.parametrize("trial", range(3))
def test_two_sigterms_to_one_rank_of_four_keep_75_mpi(tmp_path, trial):
    out = tmp_path / "run"
    proc = start_mpi(4, ["-m", "mpi_teleport.run", *LONG[2:], "--dim", "50", "--out", str(out)],
                     tmp_path, this_venv_impl())
    try:
        wait_for(out / "metrics.jsonl", timeout=120)
        _signal_twice([rank_pids(proc, 4)[1 + trial % 3]])
        status, err = finish(proc, tmp_path, timeout=120)
    finally:
        kill_job(proc)
    _assert_checkpointed(status, err, out)


@pytest.mark.parametrize("gap", [0.03, 0.06, 0.09, 0.12])
def test_two_sigterms_30_to_120ms_apart_keep_75_simulator(tmp_path, gap):
    """A small checkpoint: the second signal lands in the interpreter's finalisation."""
    out = tmp_path / "run"
    proc = _start_sim([*LONG, "--dim", "50", "--out", str(out)], tmp_path)
    try:
        wait_for(out / "metrics.jsonl", timeout=120)
        _signal_twice([proc.pid], gap=gap)
        status, err = _wait(proc)
    finally:
        proc.kill()
    _assert_checkpointed(status, err, out)


def test_a_module_exiting_at_import_is_one_line_exit_2_through_mpirun(mpirun, monkeypatch):
    """Issue 31, class 3, end to end: before, the job ended with status 3 (or 1) and no
    line of ours; the in-rank rows are in test_failures.py's table."""
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])  # the module
    proc = mpirun(3, ["-m", "mpi_teleport.run", "--problem", "import_exits:problem",
                      "--rounds", "5"], timeout=120)
    ours = [line for line in proc.stderr.splitlines() if "mpi_teleport.run" in line]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(ours) == 1 and "importing 'import_exits' called sys.exit(3)" in ours[0], proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout
