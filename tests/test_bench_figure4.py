"""benchmarks/bench_figure4.py replays one training run's virtual clock for other delays and
compute times (``virtual_times``); the replay must equal what the simulator records when
the run is made under that delay and compute time."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_figure4  # noqa: E402


def run(tmp_path: Path, name: str, algorithm: str, topology: str, tau: float, compute: float) -> Path:
    out = tmp_path / name
    flags = ["--nodes", "6", "--problem", "digits", "--algorithm", algorithm, "--topology",
             topology, "--rounds", "9", "--log-every", "2", "--lr", "0.05", "--momentum", "0.9",
             "--seed", "3", "--latency", f"mod:{tau:g}", "--clock", "virtual", "--compute-time",
             f"{compute:g}", "--progress", "off", "--out", str(out)]
    if algorithm == "teleportation":
        flags += ["--k", "3"]
    assert sim_main(flags) == 0
    return out


@pytest.mark.parametrize("algorithm,topology", [("teleportation", "ring"), ("dsgd", "ring"),
                                                ("dsgd", "base2")])
def test_replayed_virtual_time_equals_a_run_made_under_that_network(tmp_path, algorithm, topology):
    trained = run(tmp_path, "trained", algorithm, topology, 5, 20)  # the clock it records
    cfg = json.loads((trained / "config.json").read_text())
    rounds = [r["round"] for r in read_jsonl(trained / "metrics.jsonl")]
    for tau, compute in [(5, 20), (0, 20), (3, 2000), (7, 50)]:
        other = read_jsonl(run(tmp_path, f"t{tau}c{compute}", algorithm, topology, tau, compute)
                           / "metrics.jsonl")
        assert bench_figure4.virtual_times(cfg, rounds, tau, compute) == [
            r["virtual_time_s"] for r in other]
        # latency and compute change the clock, never the numbers
        assert [r["accuracy"] for r in other] == [r["accuracy"] for r in read_jsonl(
            trained / "metrics.jsonl")]


def test_from_job_without_runs_says_what_to_do(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_figure4.py"),
                           "--from-job", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no finished run" in lines[0] and "jobs/figure4.sbatch" in lines[0]
