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


def _python_sigint() -> None:
    """In the child before exec: SIGINT back to its default, so Python installs its own
    handler there, whatever this worker inherited (an ignored SIGINT is inherited across
    exec, and the API leaves an ignored SIGINT to the script, as it should)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(out, name, *extra, timeout=120):
    return subprocess.run([sys.executable, SCRIPT, str(out), name, *extra], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=_python_sigint)


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


@pytest.mark.parametrize("name, mpi", [("SIGINT", "openmpi"), ("SIGTERM", "mpich")])
def test_a_signal_to_launch_reaches_every_rank_once_and_resuming_ends_as_uninterrupted(
        tmp_path, name, mpi):
    """A terminal's Ctrl-C (SIGINT to the foreground process group), or SIGTERM (``kill``,
    ``timeout``), to ``launch -n 4 script.py``: the launcher passes it on once, every rank
    stops at the same round after the checkpoint, the scripts' finally runs, the job ends
    with 75 and one line naming the signal, nothing of the MPI's (no abort banner, no NUL);
    run again with resume="auto" it ends as the uninterrupted run (the simulator's, bit for
    bit), and once more it returns the finished run's model."""
    import os
    import signal
    import time

    from launch_helpers import implementation

    impl = implementation(mpi)
    if isinstance(impl, str):
        pytest.skip(impl)
    whole = run(tmp_path / "whole", "none")
    out = tmp_path / "run"
    cmd = [impl.python, "-m", "mpi_teleport.launch", "-n", "4", SCRIPT, str(out), "outside",
           "mpi"]
    env = impl.env(None, "api-signals")
    proc = subprocess.Popen([*cmd, "slow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline \
                and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(1.5)  # (a record a second: the run is mid-way)
        os.killpg(proc.pid, getattr(signal, name))  # (Ctrl-C: the foreground group)
        raw_out, raw_err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stdout, stderr = raw_out.decode(), raw_err.decode()
    assert proc.returncode == 75, stderr[-3000:]
    assert "finally ran" in stdout and b"\0" not in raw_err
    lines = [line for line in stderr.splitlines() if not line.startswith("+ ")]
    assert len(lines) == 1 and f"stopped by {name} at round" in lines[0], stderr[-3000:]
    assert len([d for d in os.listdir(out / "checkpoints") if d.startswith("round-")]) >= 1
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert final_x(resumed) == final_x(whole) and final_x(whole)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert again.returncode == 0, again.stderr[-3000:]  # (finished: its result, every rank)
    assert final_x(again) == final_x(whole)
