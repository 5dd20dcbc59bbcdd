"""Issue 47: the progress bar plays well with a script's output. What the script prints
(print, logging) during a run appears above the bar, never on its line; the metric shown
is marked with the round it was measured at; the ETA waits until it means something
(mpi_teleport/runtime/progress.py)."""
import io
import subprocess
import sys
from pathlib import Path

from mpi_teleport.runtime.progress import Progress

SCRIPT = """
import logging, sys, time
import mpi_teleport as mt
import mpi_teleport.runtime.progress as progress
progress.is_terminal = lambda stream: True  # (the pipe stands for a terminal here)
from mpi_teleport.problems.quadratic import Quadratic
logging.basicConfig(level=logging.INFO, format="LOG %(message)s")
def callback(record):
    print(f"PRINT round {record['round']}")
    logging.info("round %s", record["round"])
mt.teleportation(Quadratic(n=4, d=3, seed=0), nodes=4, k=2, rounds=40, lr=0.05, log_every=10,
                 progress=True, callback=callback)
print("streams back", sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__)
"""


def screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text`` (carriage returns overwrite the line)."""
    lines = []
    for line in text.split("\n"):
        shown = ""
        for piece in line.split("\r"):
            shown = piece + shown[len(piece):]
        lines.append(shown.rstrip())
    return lines


def test_prints_and_logging_land_above_the_bar(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # (one terminal: stdout and stderr interleaved as written; each stream flushes per write)
    shown = screen(proc.stderr)
    logs = [line for line in shown if "LOG" in line]
    assert logs == [f"LOG round {r}" for r in (0, 10, 20, 30, 40)]
    assert [line for line in screen(proc.stdout) if "PRINT" in line] == \
        [f"PRINT round {r}" for r in (0, 10, 20, 30, 40)]
    bars = [line for line in shown if "round 40/40" in line]
    assert bars and "@40" in bars[-1]  # (the metric's round)
    assert "streams back True" in proc.stdout


def test_the_eta_waits_and_the_bar_clears_for_a_line(capsys):
    out = io.StringIO()
    before = sys.stderr
    bar = Progress("run", True, total=1000, stream=out, terminal=True)
    try:
        bar.update(1, force=True)
        assert "eta   --" in bar.drawn  # (one round in: no estimate yet)
        sys.stderr.write("hello\n")  # (routed above the bar while it is shown)
        assert screen(out.getvalue())[-1].startswith("run")  # (drawn again)
        assert "\r" + " " * len(bar.drawn) + "\r" in out.getvalue()  # (its line cleared)
    finally:
        bar.close()
    assert sys.stderr is before and "hello" in capsys.readouterr().err


def test_where_stderr_is_not_a_terminal_the_bar_is_a_line_now_and_then():
    """A log file gets a plain line (no carriage return, no stream rerouted) at most every
    NOT_A_TERMINAL_S seconds, and the forced last one."""
    out = io.StringIO()
    before = sys.stdout, sys.stderr
    bar = Progress("run", True, total=1000, stream=out)
    assert not bar.terminal
    for r in range(1, 1001):
        bar.update(r, f"train loss {1 / r:.3g}", force=r == 1000)
    assert (sys.stdout, sys.stderr) == before  # (nothing drawn in place: nothing to reroute)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 2
    assert "round 1/1000" in lines[0] and "round 1000/1000" in lines[1]


def test_a_stale_metric_is_marked_with_its_round_and_its_age():
    out = io.StringIO()
    bar = Progress("run", True, total=100, stream=out, terminal=False)
    bar.headline, bar.headline_round = "accuracy 0.062", 0
    bar.update(0, force=True)
    bar.update(57, "train loss 0.5", force=True)
    bar.headline, bar.headline_round = "accuracy 0.51", 60
    bar.update(60, force=True)
    first, stale, fresh = out.getvalue().splitlines()
    assert "accuracy 0.062 @0 " in first and "stale" not in first
    assert "train loss 0.5 | accuracy 0.062 @0 (stale: 57 rounds old)" in stale
    assert "accuracy 0.51 @60 " in fresh and "stale" not in fresh


def test_auto_shows_no_bar_in_a_log_file_and_on_writes_plain_lines(tmp_path):
    """--progress auto with stderr redirected to a file: no bar; --progress on there: plain
    lines, no carriage return. RunSettings.from_args follows the same rule."""
    import os

    import mpi_teleport as mt
    from mpi_teleport.problems.quadratic import Quadratic

    argv = [sys.executable, "-m", "mpi_teleport.sim", "--nodes", "4", "--k", "2",
            "--algorithm", "teleportation", "--rounds", "300", "--log-every", "100"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    for mode in ("auto", "on"):
        with open(tmp_path / f"{mode}.log", "w") as log:
            subprocess.run([*argv, "--progress", mode], stderr=log, stdout=subprocess.DEVNULL,
                           env=env, check=True, timeout=120)
    assert (tmp_path / "auto.log").read_text() == ""
    on = (tmp_path / "on.log").read_text()
    assert "\r" not in on and "round 300/300" in on and len(on.splitlines()) <= 5
    flags = ["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "3"]
    shown = {mode: mt.RunSettings.from_args([*flags, "--progress", mode],
                                            problem=Quadratic(n=4, d=3)).progress
             for mode in ("auto", "on", "off")}
    assert shown == {"auto": False, "on": True, "off": False}  # (pytest's stderr: no terminal)
