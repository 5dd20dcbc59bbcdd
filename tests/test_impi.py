"""Intel MPI (issue 50, class 12): the impi-rt wheel (Intel MPI 2021, its Hydra mpiexec)
with mpi4py, in an environment of its own that the tests make on first use and keep
(.venv-impi, as .venv-mpich for MPICH; tests/launch_helpers.py). A few tests, not the
whole MPI tier (the suite's time): the run equals the simulator bit for bit, the launcher
gives Hydra no Open MPI flag, a bad flag and --elastic (no ULFM) are one line, exit 2, and
the two-host namespace bed starts ranks through Hydra's ssh bootstrap with jobs/netns-rsh.
MPI_TELEPORT_TEST_IMPI=off leaves them out (they skip, saying so), =PATH/TO/python uses that
Python's Intel MPI instead; where the wheel cannot be installed they skip, saying why."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import run_mpi
from helpers import ROOT
from launch_helpers import implementation, kill_tagged
from mpi_teleport.sim import main as sim_main

pytestmark = pytest.mark.mpirun

FLAGS = ["--rounds", "40", "--log-every", "10", "--momentum", "0.5", "--progress", "off"]


@pytest.fixture(scope="module")
def impi():
    impl = implementation("intelmpi")
    if isinstance(impl, str):
        pytest.skip(f"intelmpi: {impl}")
    assert impl.name == "intelmpi", impl  # (its mpiexec, not a wrapper that needs PATH)
    return impl


def numbers(path):
    return [(r["round"], r.get("error"), r["consensus"]) for r in map(json.loads, open(path)) if r]


def test_runs_under_intel_mpi_equal_the_simulator(impi, tmp_path):
    """Algorithm 3 and DSGD (the default comparison), 4 ranks, k = 4, momentum."""
    proc = run_mpi(4, ["-m", "mpi_teleport.run", *FLAGS, "--out", str(tmp_path / "mpi")], impl=impi,
                   timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sim_main(["--nodes", "4", *FLAGS, "--out", str(tmp_path / "sim")]) == 0
    for algorithm in ("teleportation", "dsgd"):
        ref = numbers(tmp_path / "sim" / algorithm / "metrics.jsonl")
        assert len(ref) == 5
        assert numbers(tmp_path / "mpi" / algorithm / "metrics.jsonl") == ref, algorithm


def test_the_launcher_under_intel_mpi(impi, tmp_path):
    """`python -m mpi_teleport.launch -n 8` with the Intel MPI environment's Python: its
    Hydra mpiexec (not the mpirun script, which needs mpiexec.hydra on PATH), none of Open
    MPI's flags (Hydra refuses them), the comparison table."""
    proc = subprocess.run([impi.python, "-m", "mpi_teleport.launch", "-n", "8", "--", "--rounds", "20",
                           "--progress", "off"], cwd=tmp_path, env=impi.env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = [line for line in proc.stderr.splitlines() if line.startswith("+ ")]
    assert shown == [f"+ {impi.mpirun} -n 8 {impi.python} -m mpi_teleport.run --rounds 20 --progress off"
                     "    (intelmpi)"], proc.stderr[-2000:]
    assert proc.stdout.startswith("MPI, n=8 ranks") and "Teleportation" in proc.stdout


@pytest.mark.parametrize("flags,says", [
    (["--bogus"], "unrecognized arguments: --bogus (see --help)"),
    (["--elastic", "--algorithm", "teleportation"], "--elastic needs an MPI with ULFM (Open MPI 5 under "
                                                    "mpirun --with-ft ulfm); Intel(R) MPI Library"),
], ids=["bad-flag", "elastic"])
def test_refusals_under_intel_mpi_are_one_line_exit_2(impi, flags, says):
    proc = run_mpi(2, ["-m", "mpi_teleport.run", *flags, "--rounds", "3"], impl=impi, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], proc.stderr[-2000:]  # (rank 0 alone)


@pytest.mark.xdist_group("netns")  # (the bed's tests run on one worker: tests/conftest.py)
def test_two_hosts_of_the_namespace_bed_under_intel_mpi(bed, impi, tmp_path):
    """Hydra's ssh bootstrap through jobs/netns-rsh: ranks 0, 1 on mtp-h0 and 2, 3 on
    mtp-h1 with their hostnames, per-host local ranks, 2 MiB crossing each host's link;
    then the demo through the launcher with --hosts/--rsh equals the simulator."""
    from test_multihost import AGENT, BED, bed_env, eth0_bytes, hosts, run_on_bed

    sent = [eth0_bytes(h) for h in ("mtp-h0", "mtp-h1")]
    status, out, err = run_on_bed(impi, 4, [str(ROOT / "tests" / "scripts" / "where_am_i.py")], tmp_path)
    assert status == 0, err[-3000:]
    sent = [eth0_bytes(h) - before for h, before in zip(("mtp-h0", "mtp-h1"), sent)]
    assert min(sent) >= 2 * 2**20, f"bytes sent by mtp-h0, mtp-h1: {sent}"
    facts = json.loads(out)
    assert [f["hostname"] for f in facts] == ["mtp-h0", "mtp-h0", "mtp-h1", "mtp-h1"]
    assert [(f["local_rank"], f["local_size"]) for f in facts] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert [f["from_left"] for f in facts] == [3.0, 0.0, 1.0, 2.0] and all(f["intact"] for f in facts)

    env = bed_env(impi)
    proc = subprocess.run([*BED, "exec", "mtp-h0", impi.python, "-m", "mpi_teleport.launch", "-n", "4",
                           "--hosts", hosts(2), "--rsh", AGENT, "--", *FLAGS, "--algorithm", "teleportation",
                           "--out", str(tmp_path / "mpi")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    kill_tagged(env["MPI_TELEPORT_TEST_TAG"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = [line for line in proc.stderr.splitlines() if line.startswith("+ ")][0]
    assert f"-hosts {hosts(2)} -launcher ssh -launcher-exec {AGENT}" in shown and shown.endswith("(intelmpi)")
    assert sim_main(["--nodes", "4", *FLAGS, "--algorithm", "teleportation", "--out", str(tmp_path / "sim")]) == 0
    assert numbers(tmp_path / "mpi" / "metrics.jsonl") == numbers(tmp_path / "sim" / "metrics.jsonl")
