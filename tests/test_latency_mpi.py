"""Latency layer under mpirun (small: <= 8 ranks, few rounds, hard timeouts).

* virtual clocks over MPI equal the hand-computed critical path and the simulator's
  oracle, bit for bit (modelled compute time);
* real delays: only lower bounds are asserted (a message over a 2 ms link is never
  visible before 2 ms have passed), never an upper bound: this must hold on a loaded host;
* latency changes time, never numbers: errors are bit-identical with and without it.
"""
from __future__ import annotations

import json

import pytest

from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main

from test_latency import RING4, TRIANGLE, write_csv  # the same hand-computed cases

RUN = ["-m", "mpi_teleport.run", "--progress", "off"]


def virtual_times(path):
    return [r["virtual_time_s"] for r in read_jsonl(path)]


def numbers(path):
    return [(r["round"], r["error"], r["consensus"]) for r in read_jsonl(path)]


def dsgd_virtual_times(tmp_path, mpirun, delays, compute_us: str, rounds: str) -> list:
    """virtual_time_s of every round of DSGD over MPI on the delay matrix ``delays``."""
    spec = "matrix:" + write_csv(tmp_path / "d.csv", delays)
    proc = mpirun(len(delays), [*RUN, "--algorithm", "dsgd", "--latency", spec, "--clock",
                                "virtual", "--compute-time", compute_us, "--rounds", rounds,
                                "--log-every", "1", "--out", str(tmp_path / "o")], timeout=90)
    assert proc.returncode == 0, proc.stderr
    return virtual_times(tmp_path / "o" / "metrics.jsonl")


def test_ring_of_four_matches_the_hand_computed_critical_path(tmp_path, mpirun):
    assert dsgd_virtual_times(tmp_path, mpirun, RING4, "100", "3") == [0.0, 0.0031, 0.0062, 0.0093]


def test_neighbours_at_1_and_3_ms_complete_at_3_ms(tmp_path, mpirun):
    assert dsgd_virtual_times(tmp_path, mpirun, TRIANGLE, "0", "1") == [0.0, 0.003]


@pytest.mark.parametrize("n,k,topology,variant,extra,spec", [
    (6, 3, "ring", "overlap", ["--momentum", "0.5"], "mod:7,bw:1"),
    (6, 3, "ring", "simple", ["--momentum", "0.5"], "mod:7,bw:1"),
    (5, 4, "base2", "overlap", [], "mod:7,bw:1"),
    (5, 2, "complete", "simple", [], "mod:7,bw:1"),
    # shared host links: every rank computes its round's loads as the oracle does
    (6, 3, "ring", "overlap", ["--momentum", "0.5"], "mod:7,bw:1,hosts:2"),
    (6, 3, "ring", "simple", ["--momentum", "0.5"], "mod:7,bw:1,hosts:1+3+2"),
    (5, 2, "complete", "overlap", [], "mod:7,bw:1,hosts:2"),
    # ... and links busy across rounds: each rank's knowledge of them rides its clock messages
    (4, 2, "ring", "overlap", ["--momentum", "0.5"], "mod:7,bw:0.008,hosts:2"),
    (6, 3, "ring", "simple", ["--momentum", "0.5"], "mod:7,bw:0.008,hosts:1+3+2"),
])
def test_mpi_virtual_time_equals_the_simulator_oracle(tmp_path, mpirun, n, k, topology, variant,
                                                      extra, spec):
    common = ["--k", str(k), "--topology", topology, "--variant", variant, "--latency",
              spec, "--clock", "virtual", "--compute-time", "3.5", "--rounds", "20",
              "--log-every", "2", "--seed", "4", *extra]
    assert sim_main(["--nodes", str(n), *common, "--progress", "off",
                     "--out", str(tmp_path / "sim")]) == 0
    proc = mpirun(n, [*RUN, *common, "--out", str(tmp_path / "mpi")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    for alg in ("teleportation", "dsgd"):
        ref = virtual_times(tmp_path / "sim" / alg / "metrics.jsonl")
        assert len(ref) == 11 and ref[-1] > 0
        assert virtual_times(tmp_path / "mpi" / alg / "metrics.jsonl") == ref
        assert numbers(tmp_path / "mpi" / alg / "metrics.jsonl") == numbers(
            tmp_path / "sim" / alg / "metrics.jsonl")


def test_ring_of_four_on_two_hosts_matches_the_hand_computed_rounds(tmp_path, mpirun):
    """DSGD ring over 4 ranks, 2 per host (hosts:2), 1000-byte tokens at 1 us per byte: two
    messages share each host link every round: 100 us compute + 2000 us (tests/
    test_latency.py::test_oracle_dsgd_ring_with_two_ranks_per_host)."""
    proc = mpirun(4, [*RUN, "--algorithm", "dsgd", "--latency", "bw:0.008,hosts:2", "--clock",
                      "virtual", "--compute-time", "100", "--dim", "125", "--rounds", "3",
                      "--log-every", "1", "--out", str(tmp_path / "o")], timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert virtual_times(tmp_path / "o" / "metrics.jsonl") == [0.0, 0.0021, 0.0042, 0.0063]


def test_hosts_auto_on_one_machine_is_one_host(tmp_path, mpirun):
    """hosts:auto under MPI takes the placement: here every rank shares this machine, so
    no message crosses a host link: the simulator's time with all 5 ranks on one host."""
    common = ["--k", "3", "--topology", "ring", "--momentum", "0.5", "--clock", "virtual",
              "--compute-time", "3.5", "--rounds", "8", "--log-every", "2", "--seed", "4"]
    assert sim_main(["--nodes", "5", *common, "--latency", "mod:7,bw:1,hosts:5", "--progress",
                     "off", "--out", str(tmp_path / "sim")]) == 0
    proc = mpirun(5, [*RUN, *common, "--latency", "mod:7,bw:1,hosts:auto",
                      "--out", str(tmp_path / "mpi")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    for alg in ("teleportation", "dsgd"):
        ref = virtual_times(tmp_path / "sim" / alg / "metrics.jsonl")
        assert ref[-1] > 0
        assert virtual_times(tmp_path / "mpi" / alg / "metrics.jsonl") == ref


@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_latency_changes_time_never_numbers(tmp_path, mpirun, variant):
    """Real delays under MPI give the numbers of no delay (the simulator's; MPI without
    delays equals it: tests/test_mpi.py; virtual delays: the oracle test above)."""
    common = ["--k", "2", "--variant", variant, "--momentum", "0.9", "--rounds", "9",
              "--log-every", "3", "--seed", "7"]
    assert sim_main(["--nodes", "3", *common, "--progress", "off",
                     "--out", str(tmp_path / "none")]) == 0
    proc = mpirun(3, [*RUN, *common, "--latency", "mod:100", "--clock", "real",
                      "--out", str(tmp_path / "real")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    for alg in ("teleportation", "dsgd"):
        assert numbers(tmp_path / "real" / alg / "metrics.jsonl") == numbers(
            tmp_path / "none" / alg / "metrics.jsonl")
    assert read_jsonl(tmp_path / "real" / "dsgd" / "metrics.jsonl")[-1]["virtual_time_s"] > 0


def test_real_delay_is_a_lower_bound_on_visibility(tmp_path, mpirun):
    """Node 0 exchanges with node 1 over 1 ms and node 2 over 3 ms (real clock): no
    message is ever seen before its link's delay has passed since it was posted."""
    spec = "matrix:" + write_csv(tmp_path / "d.csv", TRIANGLE)
    proc = mpirun(3, ["-m", "mpi_teleport.latency", "probe", "--latency", spec, "--reps", "8"],
                  timeout=90)
    assert proc.returncode == 0, proc.stderr
    reps = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(reps) == 8
    for rep in reps:
        for row in rep["ranks"]:
            for peer, seen in row["visible_s"].items():
                assert seen >= TRIANGLE[int(peer)][row["rank"]] * 1e-6
        assert reps and rep["ranks"][0]["exchange_s"] >= 3e-3 - 1e-4  # slowest link, roughly


def test_real_clock_rounds_take_at_least_the_link_delay(tmp_path, mpirun):
    """DSGD on 2 ranks over a 2 ms link: every round waits for the neighbour's message, so
    10 rounds take >= 9 x 2 ms of real time (one round of slack for the start-up)."""
    proc = mpirun(2, [*RUN, "--algorithm", "dsgd", "--latency", "const:2000", "--clock", "real",
                      "--rounds", "10", "--log-every", "10", "--out", str(tmp_path / "o")],
                  timeout=90)
    assert proc.returncode == 0, proc.stderr
    last = read_jsonl(tmp_path / "o" / "metrics.jsonl")[-1]
    assert last["time_s"] >= 9 * 2e-3
    assert last["virtual_time_s"] >= 10 * 2e-3
    assert "warning" not in proc.stderr  # 2 ranks fit this host's cores


# (float32 tokens with a bandwidth term: tests/in_rank/test_command_line_mpi.py)


def test_k_auto_with_the_latency_layer_records_virtual_time_in_both(tmp_path, mpirun):
    # Regression: the simulator's Algorithm 2 once wrote no virtual_time_s at all.
    common = ["--k", "auto", "--algorithm", "teleportation", "--rounds", "12", "--log-every",
              "4", "--latency", "mod:5,bw:2", "--clock", "virtual", "--compute-time", "30",
              "--seed", "2", "--progress", "off"]
    assert sim_main(["--nodes", "7", *common, "--out", str(tmp_path / "sim")]) == 0
    proc = mpirun(7, [*RUN, *common, "--out", str(tmp_path / "mpi")], timeout=180)
    assert proc.returncode == 0, proc.stderr
    ref = virtual_times(tmp_path / "sim" / "metrics.jsonl")
    assert len(ref) == 8 and ref[-1] > ref[0] >= 0
    assert virtual_times(tmp_path / "mpi" / "metrics.jsonl") == ref
