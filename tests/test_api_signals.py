"""Issue 47: SIGINT and SIGTERM through the Python API keep the work. The call finishes
the round in progress, writes a checkpoint, then raises in the script, whose ``finally``
runs: KeyboardInterrupt (uncaught, the process dies of SIGINT as after any Ctrl-C: 130
in a shell) or mpi_teleport.runtime.signals.Stopped (a SystemExit: status 75); resuming with ``resume="auto"`` ends as the uninterrupted run. A script
with its own handler keeps it (tests/scripts/api_signal_script.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).parent / "scripts" / "api_signal_script.py")


def run(out, name, *extra, timeout=120):
    return subprocess.run([sys.executable, SCRIPT, str(out), name, *extra], capture_output=True,
                          text=True, timeout=timeout)


def final_x(proc):
    return [line for line in proc.stdout.splitlines() if line.startswith("x ")]


@pytest.mark.parametrize("name,status,words", [
    ("SIGINT", -2, "KeyboardInterrupt: stopped by SIGINT at round 20: checkpoint written to"),
    ("SIGTERM", 75, "mpi_teleport: stopped by SIGTERM at round 20: checkpoint written to"),
])
def test_a_signal_checkpoints_raises_in_the_script_and_resuming_ends_as_uninterrupted(
        tmp_path, name, status, words):
    whole = run(tmp_path / "whole", "none")
    assert whole.returncode == 0, whole.stderr
    stopped = run(tmp_path / "run", name)
    assert stopped.returncode == status, stopped.stderr
    assert "finally ran" in stopped.stdout and not final_x(stopped)
    assert words in stopped.stderr and "(or resume='auto')" in stopped.stderr
    if name == "SIGTERM":  # (a SystemExit: one line, no traceback)
        assert "Traceback" not in stopped.stderr and len(stopped.stderr.strip().splitlines()) == 1
    assert (tmp_path / "run" / "checkpoints" / "round-00000020" / "MANIFEST.json").exists()
    resumed = run(tmp_path / "run", name)  # (the mark file: no second signal)
    assert resumed.returncode == 0, resumed.stderr
    assert final_x(resumed) == final_x(whole) and final_x(whole)


def test_a_script_with_its_own_handler_keeps_it(tmp_path):
    proc = run(tmp_path / "run", "SIGTERM", "own")
    assert proc.returncode == 0, proc.stderr
    assert "own handler 15" in proc.stdout and final_x(proc)


def test_the_handlers_are_the_scripts_again_after_the_call():
    import signal

    import mpi_teleport as mt
    from mpi_teleport.problems.quadratic import Quadratic

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    mt.dsgd(Quadratic(n=4, d=3, seed=0), nodes=4, rounds=3, lr=0.05)
    assert {s: signal.getsignal(s) for s in before} == before
