"""The MPI runtime under mpirun (each launch has a hard timeout: a deadlock fails).

Simulator, Algorithm 3 (overlap) and Algorithm 1 (simple) must produce bit-identical
errors in float64; DSGD over MPI must equal the simulator's DSGD likewise."""
import os
import time

import pytest

from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from helpers import without_time

# One end-to-end setting under mpirun per MPI implementation: k < n with momentum on a
# time-varying topology, so Algorithm 3's overlap, Algorithm 1 and DSGD all exchange
# momentum buffers. The fan-out over topologies and k (seven settings here before) runs
# the same back end over an in-process transport: tests/test_mpi_backend_topologies.py.
CASES = [  # (n, k, topology, seed, extra flags)
    (5, 3, "base2", 3, ["--momentum", "0.5"]),
]


def numbers(path):
    return [(r["round"], r["error"], r["consensus"]) for r in read_jsonl(path)]


@pytest.mark.mpi_tier
@pytest.mark.parametrize("n,k,topology,seed,extra", CASES)
def test_mpi_variants_and_simulator_bit_identical(tmp_path, mpirun, n, k, topology, seed, extra):
    common = ["--k", str(k), "--topology", topology, "--seed", str(seed), "--rounds", "60",
              "--log-every", "3", *extra]
    assert sim_main(["--nodes", str(n), *common, "--out", str(tmp_path / "sim")]) == 0
    overlap = mpirun(n, ["-m", "mpi_teleport.run", *common, "--out", str(tmp_path / "overlap")])
    assert overlap.returncode == 0, overlap.stderr
    simple = mpirun(n, ["-m", "mpi_teleport.run", *common, "--algorithm", "teleportation",
                        "--variant", "simple", "--out", str(tmp_path / "simple")])
    assert simple.returncode == 0, simple.stderr
    ref = numbers(tmp_path / "sim" / "teleportation" / "metrics.jsonl")
    assert len(ref) == 21
    assert numbers(tmp_path / "overlap" / "teleportation" / "metrics.jsonl") == ref
    assert numbers(tmp_path / "simple" / "metrics.jsonl") == ref
    assert numbers(tmp_path / "overlap" / "dsgd" / "metrics.jsonl") == numbers(
        tmp_path / "sim" / "dsgd" / "metrics.jsonl")
    # no latency layer, no virtual clock recorded
    assert "virtual_time_s" not in read_jsonl(tmp_path / "overlap" / "dsgd" / "metrics.jsonl")[-1]


def test_main_job_with_25_ranks_prints_the_comparison_table(mpirun):
    proc = mpirun(25, ["-m", "mpi_teleport.run"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("MPI, n=25 ranks")
    assert "rounds to 0.001" in lines[1] and "final error" in lines[1] and "wall time" in lines[1]
    tele = next(line for line in lines if line.startswith("Teleportation (k=8, ring)"))
    dsgd = next(line for line in lines if line.startswith("Decentralized SGD (ring)"))
    from mpi_teleport.session.settings import resolve
    from mpi_teleport.disk.output import RunFiles
    from mpi_teleport.sim import simulate

    cfg = resolve({"nodes": 25})
    expected = simulate(cfg, "teleportation", cfg.k, RunFiles(None))
    assert tele.split()[3] == str(expected["rounds_to_target"])  # equals the simulator's
    assert tele.split()[4] == f"{expected['final_error']:.3e}"
    assert dsgd.split()[3:5] == [">", "1000"]  # DSGD on a 25-ring does not reach 1e-3
    assert proc.stdout.count("Teleportation") == 1  # rank 0 alone prints


@pytest.mark.mpi_tier
def test_exception_on_one_rank_ends_the_job_promptly(mpirun):
    start = time.monotonic()
    proc = mpirun(6, ["tests/scripts/fail_on_one_rank.py", "--rounds", "100000", "--k", "6",
                      "--algorithm", "dsgd"], timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert proc.stderr.count("RuntimeError: injected failure on rank 2") == 1, proc.stderr
    assert elapsed < 60  # a hang would take the 120 s timeout; not a timing assertion on speed


# Bad flags under MPI, end to end through mpirun (the exit status of the job, one line in
# the stderr of all ranks together); every other bad input under MPI is a row of
# tests/test_failures.py's table (one job of three ranks, under Open MPI and MPICH).
@pytest.mark.parametrize("flags,fragment", [
    (["--nodes", "3"], "does not match the 2 MPI ranks"),
])
def test_bad_flags_under_mpi_one_line_exit_2(mpirun, flags, fragment):
    proc = mpirun(2, ["-m", "mpi_teleport.run", *flags], timeout=60)
    assert proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if "mpi_teleport.run: error:" in line]
    assert len(ours) == 1 and fragment in ours[0]  # printed by rank 0 only
    assert "Traceback" not in proc.stderr


def test_time_s_counts_until_every_rank_has_finished_the_round(tmp_path, mpirun):
    # Alg. 3, n = 4, k = 2: pick a round r whose holders, and round r - 1's, leave out rank 0
    # (the root, which writes time_s), and make a holder of round r - 1 step 1 s late. The
    # root has nothing to do in either round and reaches the record of round r at once;
    # round r is not over until the late node's y has reached round r's holders, so the
    # record must count that second (it once read the root's own clock and did not)
    from mpi_teleport.core.schedule import holders

    rosters = [set(holders(0, 4, 2, t).tolist()) for t in range(40)]
    r = next(t for t in range(2, 40) if 0 not in rosters[t - 1] | rosters[t])
    late = min(rosters[r - 1])
    flags = ["--algorithm", "teleportation", "--k", "2", "--rounds", str(r + 1), "--log-every", "1",
             "--progress", "off"]
    proc = mpirun(4, ["tests/scripts/late_rank.py", *flags, "--out", str(tmp_path / "mpi")], timeout=120,
                  env={**os.environ, "LATE_NODE": str(late), "LATE_ROUND": str(r - 1), "LATE_S": "1.0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = read_jsonl(tmp_path / "mpi" / "metrics.jsonl")
    by_round = {rec["round"]: rec["time_s"] for rec in records}
    assert by_round[r] - by_round[r - 1] >= 0.9, (r, late, by_round)
    assert sim_main(["--nodes", "4", *flags, "--out", str(tmp_path / "sim")]) == 0
    assert without_time(records) == without_time(read_jsonl(tmp_path / "sim" / "metrics.jsonl"))


def test_non_finite_loss_under_mpi(mpirun):
    proc = mpirun(4, ["-m", "mpi_teleport.run", "--lr", "5", "--rounds", "300"], timeout=60)
    assert proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if "error:" in line and "non-finite" in line]
    assert len(ours) == 1 and "token" in ours[0]


# Algorithm 2 over MPI, end to end under each MPI implementation: Algorithm 1 with momentum
# here; Algorithm 3's search through the command line over MPI: tests/test_k_select.py's MPI
# job (records and summary compared whole); both variants' search on the back end:
# tests/test_backend_threads.py.
@pytest.mark.mpi_tier
@pytest.mark.parametrize("variant,extra", [("simple", ["--momentum", "0.5"])])
def test_k_auto_search_over_mpi_equals_simulator(tmp_path, mpirun, variant, extra):
    common = ["--k", "auto", "--algorithm", "teleportation", "--topology", "base2", "--rounds", "40",
              "--log-every", "4", "--seed", "3", "--variant", variant, *extra]
    assert sim_main(["--nodes", "9", *common, "--out", str(tmp_path / "sim")]) == 0
    proc = mpirun(9, ["-m", "mpi_teleport.run", *common, "--out", str(tmp_path / "mpi")])
    assert proc.returncode == 0, proc.stderr

    assert without_time(read_jsonl(tmp_path / "mpi" / "metrics.jsonl")) == without_time(
        read_jsonl(tmp_path / "sim" / "metrics.jsonl"))
    import json

    a = json.loads((tmp_path / "mpi" / "summary.json").read_text())
    b = json.loads((tmp_path / "sim" / "summary.json").read_text())
    for key in ("k", "candidates", "candidate_final_error", "rounds_to_target"):
        assert a[key] == b[key]


# The network (float32 tokens) over MPI with a bandwidth term in its virtual clock, bit for
# bit: tests/in_rank/test_command_line_mpi.py (run.main inside ranks that have imported torch).
