"""Ctrl-C (SIGINT) stops a simulator run like SIGTERM: one line, a complete final
checkpoint, exit status 75; a second Ctrl-C stops it at once, one line, no traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpi_teleport import checkpoint
from mpi_teleport.runtime import signals
from mpi_teleport.disk.output import read_jsonl
from helpers import ROOT

LONG = ["-m", "mpi_teleport.sim", "--nodes", "4", "--algorithm", "teleportation", "--k", "2",
        "--rounds", "100000000", "--momentum", "0.5", "--seed", "5", "--progress", "off"]


def _start(args, tmp_path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, *LONG, *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_handlers(proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the process catches SIGUSR1 (so the Terminator is installed), from
    /proc/<pid>/status."""
    deadline = time.monotonic() + timeout
    bit = 1 << (signal.SIGUSR1 - 1)
    while True:
        try:
            text = Path(f"/proc/{proc.pid}/status").read_text()
            caught = int(next(l for l in text.splitlines() if l.startswith("SigCgt:")).split()[1], 16)
        except (OSError, StopIteration):
            caught = 0
        if caught & bit:
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no handlers installed: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} did not appear: {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)


def test_ctrl_c_writes_a_complete_checkpoint_exit_75(tmp_path):
    out = tmp_path / "run"
    proc = _start(["--out", str(out), "--log-every", "20", "--checkpoint-every", "1000"], tmp_path)
    try:
        _wait_for(out / "metrics.jsonl", proc)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == signals.EXIT_CHECKPOINTED, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("python -m mpi_teleport.sim: stopped by SIGINT at round ")
    assert f"continue with --resume {out}" in lines[0]
    path, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal" and f"checkpoint written to {path}" in lines[0]
    assert sorted(p.name for p in path.iterdir()) == [".run_id", "MANIFEST.json", "v.npy", "x.npy"]
    # the simulator stops at the next round; metrics.jsonl holds the logging rounds up to it
    assert 0 <= manifest["round"] - read_jsonl(out / "metrics.jsonl")[-1]["round"] < 20


def test_ctrl_c_with_nowhere_to_write_exits_130_in_one_line(tmp_path):
    proc = _start(["--log-every", "20"], tmp_path)
    try:
        _wait_for_handlers(proc)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert len(err.strip().splitlines()) == 1 and "no checkpoint written" in err, err


def test_ctrl_c_while_setting_up_stops_at_once_without_traceback(tmp_path):
    """The first Ctrl-C lands while the run is still setting up (the digits problem imports
    torch and scikit-learn: seconds). Nothing has run, so nothing needs saving: it stops at
    once, in one line, 130 (issue 31, class 2; before, only a second Ctrl-C ended it
    soon). A second Ctrl-C while busy elsewhere: the next test."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpi_teleport.sim", "--problem", "digits", "--nodes", "4",
         "--algorithm", "teleportation", "--k", "2", "--rounds", "100000", "--progress", "off",
         "--out", str(out), "--checkpoint-every", "1000"],
        cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_handlers(proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "python -m mpi_teleport.sim: stopped by SIGINT before round 0 (during the set-up): "
        "nothing ran"), err
    assert not out.exists() or not (out / "metrics.jsonl").exists()


def test_second_ctrl_c_while_busy_stops_at_once(tmp_path):
    """The same without the simulator: a process busy where no round ends."""
    code = ("import time; from mpi_teleport.runtime import signals\n"
            "with signals.Terminator(prog='demo') as t:\n"
            "    print('ready', flush=True)\n"
            "    while True: time.sleep(0.01)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGINT
    assert err.strip() == "demo: stopped at once by a second Ctrl-C (SIGINT), without a final checkpoint"


def test_terminator_catches_sigint_and_restores_the_handler():
    before = signal.getsignal(signal.SIGINT)
    with signals.Terminator() as t:
        assert signal.SIGINT in t.signals
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt: a flag
        assert t.signum == signal.SIGINT
        signal.raise_signal(signal.SIGTERM)
        assert t.signum == signal.SIGINT  # the first one counts
    assert signal.getsignal(signal.SIGINT) is before


def test_release_turns_ctrl_c_into_a_one_line_stop(tmp_path):
    """After release() (work without checkpoints) a Ctrl-C still ends the process in one
    line, not with a KeyboardInterrupt traceback."""
    code = ("import time; from mpi_teleport.runtime import signals\n"
            "with signals.Terminator(prog='demo') as t:\n"
            "    t.release(); print('ready', flush=True); time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGINT
    assert err.strip() == "demo: stopped at once by Ctrl-C (SIGINT), without a final checkpoint"


def test_signals_module_imports_no_mpi():
    code = "import sys, mpi_teleport.runtime.signals; assert 'mpi4py' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env, timeout=60)
