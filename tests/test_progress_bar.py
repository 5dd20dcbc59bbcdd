"""Issue 47: the progress bar plays well with a script's output. What the script prints
(print, logging) during a run appears above the bar, never on its line; the metric shown
is marked with the round it was measured at; the ETA waits until it means something
(mpi_teleport/runtime/progress.py)."""
import io
import subprocess
import sys

from mpi_teleport.runtime.progress import Progress

SCRIPT = """
import logging, sys, time
import mpi_teleport as mt
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
    bar = Progress("run", True, total=1000, stream=out)
    try:
        bar.update(1, force=True)
        assert "eta   --" in bar.drawn  # (one round in: no estimate yet)
        sys.stderr.write("hello\n")  # (routed above the bar while it is shown)
        assert screen(out.getvalue())[-1].startswith("run")  # (drawn again)
        assert "\r" + " " * len(bar.drawn) + "\r" in out.getvalue()  # (its line cleared)
    finally:
        bar.close()
    assert sys.stderr is before and "hello" in capsys.readouterr().err
