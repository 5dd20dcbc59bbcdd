"""Signals around the shutdown and the set-up (mpi_teleport/runtime/signals.py, Terminator.commit,
interruptible; checkpoint/keeper.py, Keeper.gate): once the processes agreed to stop, a
second SIGTERM (srun sends them ~50 ms apart at a time limit) or SIGINT changes nothing,
also to one rank of four or to the launcher: exit 75 with the checkpoint; a signal while a
slow ``--problem module:function`` factory builds stops it at once, in one line; a factory
calling sys.exit(0), or a module exiting at import, is one line, exit 2. Simulator and
MPI; every process runs under a hard timeout."""
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


def _assert_checkpointed(status, err, out, name="SIGTERM"):
    assert status == 75, err[-2000:]
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if f"stopped by {name}" in line]
    path, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal"


# ----------------------------------------------------------------------------- simulator
def test_two_sigterms_50ms_apart_exit_75_simulator(tmp_path):
    """A 16 MB checkpoint and an exit that lingers 2 s: the second signal lands while the
    checkpoint is written or while the interpreter exits (as the MPI test below)."""
    out = tmp_path / "run"
    proc = _start_sim([*LONG, "--out", str(out)], tmp_path, slow_exit=True)
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


def test_a_factory_calling_sys_exit_is_one_line_exit_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mpi_teleport.sim", "--problem",
                          "factories:exits", "--nodes", "4", "--k", "2", "--rounds", "5"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "factories:exits" in lines[0] and "sys.exit(0)" in lines[0]


# ----------------------------------------------------------------------------- MPI
def test_two_sigterms_50ms_apart_exit_75_mpi(tmp_path):
    """Both ranks, a 16 MB checkpoint and an exit that lingers 2 s (slow_exit.py): the second
    signal lands while the checkpoint is written or while the interpreter exits, whichever
    the machine's load makes it. (A second trial without the slow exit only covered the
    first of these windows; the simulator's test keeps both trials.)"""
    out = tmp_path / "run"
    proc = start_mpi(2, [str(SCRIPTS / "slow_exit.py"), "mpi_teleport.run", *LONG[2:], "--out", str(out)],
                     tmp_path, this_venv_impl())
    try:
        wait_for(out / "metrics.jsonl", timeout=120)
        _signal_twice(rank_pids(proc, 2))
        status, err = finish(proc, tmp_path, timeout=120)
    finally:
        kill_job(proc)
    _assert_checkpointed(status, err, out)


# Issue 31, class 1: two SIGTERMs to *one* rank of a 4-rank job with a small checkpoint.
# The stop is agreed and written and the ranks finalise within the gap, so the second
# signal lands after the interpreter put its Python handlers back to the default (in
# MPI_Finalize and the exit): that rank died of SIGTERM and mpirun reported 143. Before
# the fix: 3 of 3 trials at 50 ms on a quiet machine (4 of 4 by script); with the gaps
# below, the three rank rows failed and the launcher row passed at load 6. The handlers
# are now SIG_IGN once the stop is decided.
@pytest.mark.parametrize("to, gap", [("rank 1", 0.05), ("rank 3", 0.2), ("rank 2", 0.5),
                                     ("the launcher (SIGUSR1)", 0.05)])
def test_two_signals_to_one_process_of_a_4_rank_job_keep_75_mpi(tmp_path, to, gap):
    """(The gaps: where the second signal lands depends on the machine's load: a quiet
    machine has finished the stop within 50 ms, a loaded one takes longer.)"""
    out = tmp_path / "run"
    proc = start_mpi(4, ["-m", "mpi_teleport.run", *LONG[2:], "--dim", "50", "--out", str(out)],
                     tmp_path, this_venv_impl())
    try:
        wait_for(out / "metrics.jsonl", timeout=120)
        if "launcher" in to:  # (mpirun forwards SIGUSR1 to every rank)
            _signal_twice([proc.pid], gap=gap, sig=signal.SIGUSR1, second=signal.SIGUSR1)
        else:
            _signal_twice([rank_pids(proc, 4)[int(to[-1])]], gap=gap)
        status, err = finish(proc, tmp_path, timeout=120)
    finally:
        kill_job(proc)
    _assert_checkpointed(status, err, out, "SIGUSR1" if "launcher" in to else "SIGTERM")


@pytest.mark.parametrize("gap", [0.06, 0.12, 0.12])
def test_two_sigterms_30_to_120ms_apart_keep_75_simulator(tmp_path, gap):
    """A small checkpoint: the second signal lands in the interpreter's finalisation, after
    it has put its Python handlers back to the default (before the fix, on this machine:
    died of SIGTERM in 4 of 16 trials, all four with the 120 ms gap)."""
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


# Issue 31, class 2: a signal while a --problem factory runs stopped the process only when
# the factory returned (27 s later for a 30 s factory). The factory here takes 60 s; the
# process must be gone well before (nothing ran, nothing to save): one line, 128 + signal,
# or 75 when resuming (its checkpoint stands).
VERY_SLOW = ["--problem", "factories:very_slow", "--k", "2", "--algorithm", "teleportation",
             "--rounds", "100", "--progress", "off"]


def _stopped_before_round_0(status, err, sig, want=None):
    lines = [line for line in err.strip().splitlines() if "mpi_teleport" in line]
    assert status == (want or 128 + sig), err[-2000:]
    assert len(lines) == 1 and f"stopped by {signal.Signals(sig).name} before round" in lines[0] \
        and "(during the set-up): nothing ran" in lines[0], err[-2000:]
    assert "Traceback" not in err


@pytest.mark.parametrize("k", ["2", "auto"])  # (SIGINT: test_sigint.py)
def test_a_signal_stops_a_slow_factory_at_once_simulator(tmp_path, monkeypatch, k):
    monkeypatch.setenv("FACTORY_STARTED", str(tmp_path / "started"))
    sig = signal.SIGTERM
    proc = _start_sim(["--nodes", "4", *VERY_SLOW, "--k", k], tmp_path)
    try:
        wait_for(tmp_path / "started", timeout=120)  # inside the factory's 60 s
        start = time.monotonic()
        proc.send_signal(sig)
        status, err = _wait(proc, timeout=40)
        assert time.monotonic() - start < 30, "waited for the factory"
    finally:
        proc.kill()
    _stopped_before_round_0(status, err, sig)


def test_a_signal_stops_a_slow_factory_of_a_resumed_run_with_75(tmp_path, monkeypatch):
    out = tmp_path / "run"
    first = subprocess.run([sys.executable, "-m", "mpi_teleport.sim", "--nodes", "4",
                            *VERY_SLOW, "--rounds", "10", "--checkpoint-every", "5", "--out",
                            str(out)], cwd=tmp_path, env=dict(_env(), FACTORY_SLEEP="0"),
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    before = checkpoint.locate(out)
    monkeypatch.setenv("FACTORY_STARTED", str(tmp_path / "started"))
    proc = _start_sim(["--resume", str(out), "--rounds", "20"], tmp_path)
    try:
        wait_for(tmp_path / "started", timeout=120)
        proc.send_signal(signal.SIGTERM)
        status, err = _wait(proc, timeout=40)
    finally:
        proc.kill()
    _stopped_before_round_0(status, err, signal.SIGTERM, want=75)
    assert f"continue with --resume {out}" in err and checkpoint.locate(out) == before


@pytest.mark.parametrize("to", ["every rank", "the launcher (SIGUSR1)"])
def test_a_signal_stops_a_slow_factory_at_once_mpi(tmp_path, monkeypatch, to):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])  # the factory's module
    monkeypatch.setenv("FACTORY_STARTED", str(tmp_path / "started"))
    proc = start_mpi(3, ["-m", "mpi_teleport.run", *VERY_SLOW], tmp_path, this_venv_impl())
    sig = signal.SIGUSR1 if "launcher" in to else signal.SIGTERM
    try:
        pids = rank_pids(proc, 3)
        wait_for(tmp_path / "started", timeout=120)
        time.sleep(1)  # (every rank inside the factory, most likely)
        start = time.monotonic()
        for pid in ([proc.pid] if "launcher" in to else pids):  # (mpirun forwards SIGUSR1)
            os.kill(pid, sig)
        status, err = finish(proc, tmp_path, timeout=45)
        assert time.monotonic() - start < 30, "waited for the factory"
    finally:
        kill_job(proc)
    _stopped_before_round_0(status, err, sig)
