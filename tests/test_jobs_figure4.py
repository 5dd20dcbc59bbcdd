"""jobs/figure4.sbatch (the paper's Figure 4) in quick mode under the local SLURM.

The quick job runs digits on 2 srun-launched ranks with k = 1 (one token between two nodes:
the test's size; its ranks import torch, and the job's plumbing is the same at 4 or 25),
tau = 5 us on the virtual clock with a modelled compute time, for Teleportation, DSGD on the ring and DSGD on the Base-2 Graph, and
ends with ``benchmarks/bench_figure4.py --from-job``. Every run's records (accuracy, loss,
consensus and ``virtual_time_s``) must equal the simulator's for the same flags. Skips, with
the reason, where SLURM cannot start (helpers shared with tests/test_jobs_slurm.py).
"""
from __future__ import annotations

import json
import re

import pytest

from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
import subprocess

from test_jobs_slurm import Job, early_dir, session_finish, slurm_env, take_early  # noqa: F401  (stops the SLURM this session started)
from helpers import ROOT, without_time

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(1500)]

NTASKS = ["-n", "2"]  # (the job's quick mode takes at most 4)
QUICK = {"QUICK": "1", "K": "1"}

METHODS = ("teleportation", "dsgd-ring", "dsgd-base2")


def started_flags(logs: str) -> dict:
    """method -> the mpi_teleport.run flags of its 'start' line in the job's log."""
    found = {}
    for line in logs.splitlines():
        m = re.search(r" start \S+_(teleportation|dsgd-ring|dsgd-base2): .* -m mpi_teleport\.run (.*)$",
                      line)
        if m:
            found[m.group(1)] = m.group(2).split()
    return found


def start_early(config, names: list[str]) -> None:
    """Submit the quick job as soon as the tests are collected, where SLURM is already up
    (tests/conftest.py calls this; as test_jobs_slurm.start_early): it runs on the core the
    other tests leave idle."""
    if config.option.collectonly or not (ROOT / "jobs" / "figure4.sbatch").exists():
        return
    try:
        if subprocess.run(["bash", "jobs/local-cluster.sh", "status"], cwd=ROOT,
                          capture_output=True, timeout=60).returncode != 0:
            return
        env = slurm_env(config)  # (already up: decided here, returns at once)
    except (OSError, subprocess.SubprocessError, pytest.skip.Exception, pytest.fail.Exception):
        return
    Job("figure4", "figure4.sbatch", NTASKS, {**env, **QUICK}, early_dir(config) / "figure4")


def test_figure4_job_quick_mode_equals_the_simulator(tmp_path, pytestconfig):
    if not (ROOT / "jobs" / "figure4.sbatch").exists():
        pytest.skip("jobs/figure4.sbatch does not exist")
    env = slurm_env(pytestconfig)
    job = take_early(pytestconfig, "figure4", env)
    if job is None:
        job = Job("figure4", "figure4.sbatch", NTASKS, {**env, **QUICK}, tmp_path / "job")
    try:
        status = job.wait(timeout=1200)
    finally:
        job.cancel()
    logs = job.logs()
    assert status == 0, f"sbatch --wait figure4.sbatch: status {status}\n{logs[-4000:]}"
    assert "srun --mpi=pmix" in logs, logs[-2000:]
    assert "checkpoints: yes" in logs, logs[-2000:]  # (a module move once turned them off silently)
    out = job.tmp / "out"
    flags = started_flags(logs)
    assert set(flags) == set(METHODS), logs[-3000:]
    for method in METHODS:
        run = out / "tau5" / "alpha0.1" / "lr0.05" / "seed0" / method
        summary = json.loads((run / "summary.json").read_text())
        assert summary["n"] == 2
        records = without_time(read_jsonl(run / "metrics.jsonl"))
        assert records and all("virtual_time_s" in r for r in records)
        assert "--compute-time" in flags[method] and "mod:5" in flags[method]
        sim_flags = list(flags[method])
        sim_flags[sim_flags.index("--out") + 1] = str(tmp_path / "sim" / method)
        assert sim_main(["--nodes", "2", *sim_flags]) == 0
        assert records == without_time(read_jsonl(tmp_path / "sim" / method / "metrics.jsonl")), method
    # the plot step tabulated every method
    table = json.loads((out / "figure4.json").read_text())
    assert table["methods"] == list(METHODS) and table["taus_us"] == [5.0]
    assert (out / "figure4.png").stat().st_size > 0 and (out / "figure4.csv").is_file()
