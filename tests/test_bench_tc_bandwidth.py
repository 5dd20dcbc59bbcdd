"""benchmarks/bench_tc_bandwidth.py's arithmetic, without the test bed: the bare chain moves
exactly the messages whose bytes the physical bound counts, the ratios are computed from a
row's seconds, and ``--plot --replace`` draws a re-run case from the last file."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_tc_bandwidth as bench  # noqa: E402

DIM = 1000


def test_the_bare_chain_moves_the_bytes_the_bound_counts():
    # Teleportation k = 2 over 4 ranks, 2 per host: each round's pairs go from the round's
    # holders to the next round's, and their host-link bytes are the plan's
    pairs = bench.round_pairs("teleportation-4-k2", 4, DIM, 0, 12)
    loads = list(bench.host_link_loads("teleportation-4-k2", 4, DIM, 0, 12))
    assert len(pairs) == len(loads) == 12
    for one, links in zip(pairs, loads):
        assert one and all(s != r for s, r in one)
        out, into = np.zeros(2), np.zeros(2)
        for s, r in one:
            if s // 2 != r // 2:  # crosses the host links
                out[s // 2] += 8 * DIM
                into[r // 2] += 8 * DIM
        assert out.tolist() == links.out_bytes.tolist() and into.tolist() == links.in_bytes.tolist()
    for t in range(11):  # Alg. 3's chain: a round's senders are the previous round's receivers
        receivers = {r for _, r in pairs[t]}
        assert {s for s, _ in pairs[t + 1]} <= receivers | {s for s, _ in pairs[t]}
    # DSGD on the ring: every rank to both neighbours, every round
    ring = bench.round_pairs("dsgd-4-ring", 4, DIM, 0, 2)
    assert ring[0] == ring[1] == [[0, 1], [0, 3], [1, 0], [1, 2], [2, 1], [2, 3], [3, 0], [3, 2]]
    # the bound: the busier direction of host 0's link, round by round (hand-computed here)
    busiest = sum(max(one.out_bytes.max(), one.in_bytes.max()) for one in loads)
    assert bench.physical_bound_s("teleportation-4-k2", 4, DIM, 50, 0, 12) == busiest * 8 / 50e6 / 12


def row(**over):
    base = {"implementation": "openmpi", "config": "dsgd-2", "message_bytes": 500_000, "rate_mbit": 50.0,
            "measured_s_per_round": 0.1, "predicted_s_per_round": 0.09, "bound_s_per_round": 0.08,
            "window_bound_s_per_round": 0.05, "tcp_s_per_round": 0.084}
    return {**base, **over}


def test_ratios_come_from_the_seconds():
    got = bench.with_ratios(row(bare_mpi_s_per_round=0.085, measured_over_bound=9.0))
    step = 0.09 - 0.08 / bench.TCP_GOODPUT
    assert got["step_s_per_round"] == step > 0
    assert got["measured_over_bound"] == 0.1 / 0.08  # (a stale ratio in the row is replaced)
    assert got["measured_over_window_bound"] == 0.1 / 0.05
    assert got["measured_over_bound_plus_step"] == 0.1 / (0.08 + step)
    assert got["predicted_over_measured"] == 0.09 / 0.1
    assert got["tcp_over_its_bound"] == 0.084 / (500_000 * 8 / 50e6)
    assert got["bare_over_bound"] == 0.085 / 0.08
    assert got["measured_over_bare_plus_step"] == 0.1 / (0.085 + step)
    # a prediction below the wire's own time: no negative step
    assert bench.with_ratios(row(predicted_s_per_round=0.05))["step_s_per_round"] == 0.0
    assert "bare_over_bound" not in bench.with_ratios(row())


def test_plot_replace_draws_a_rerun_case_from_the_last_file(tmp_path, capsys):
    first = [row(), row(config="teleportation-4-k2", measured_s_per_round=0.2)]
    again = [row(config="teleportation-4-k2", measured_s_per_round=0.12, bare_mpi_s_per_round=0.1)]
    for name, rows in (("a", first), ("b", again)):
        (tmp_path / f"bench_tc_bandwidth_{name}.json").write_text(json.dumps({"rows": rows}))
    paths = [str(tmp_path / "bench_tc_bandwidth_a.json"), str(tmp_path / "bench_tc_bandwidth_b.json")]
    assert bench.plot_results(paths, tmp_path, "both", replace=True) == 0
    table = capsys.readouterr().out
    lines = [line for line in table.splitlines() if line.startswith("| 0.5 MB")]
    assert [line.split(" | ")[3] for line in lines] == ["dsgd-2", "teleportation-4-k2"]
    assert "| 1.50 |" in lines[1] and "| 1.25 |" in lines[1]  # 0.12 / 0.08, bare 0.1 / 0.08
    assert (tmp_path / "bench_tc_bandwidth_both.png").stat().st_size > 0


def test_a_repeated_case_is_its_median_and_range(tmp_path, capsys, monkeypatch):
    # --repeat 3: the same case three times (in turn with the others), one row each
    runs = [row(config="teleportation-4-k2", measured_s_per_round=m, repeat=i)
            for i, m in enumerate((0.12, 0.09, 0.1))]
    merged = bench.repeats_merged([bench.with_ratios(r) for r in [*runs, row()]])
    assert [r["config"] for r in merged] == ["teleportation-4-k2", "dsgd-2"]
    tele, once = merged
    assert tele["runs"] == 3 and "runs" not in once
    assert tele["measured_over_bound"] == 0.1 / 0.08  # the median run, not the mean
    assert tele["measured_over_bound_range"] == (0.09 / 0.08, 0.12 / 0.08)
    assert tele["predicted_over_measured"] == 0.09 / 0.1
    assert "measured_over_bound_range" not in once
    even = bench.repeats_merged([bench.with_ratios(row(measured_s_per_round=m)) for m in (0.1, 0.12)])
    assert even[0]["measured_over_bound"] == (0.1 / 0.08 + 0.12 / 0.08) / 2
    (tmp_path / "bench_tc_bandwidth_r.json").write_text(json.dumps({"rows": [bench.with_ratios(r) for r in runs]}))
    assert bench.plot_results([str(tmp_path / "bench_tc_bandwidth_r.json")], tmp_path, "r") == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| 0.5 MB")]
    assert "| 1.25 (1.12-1.50) |" in line
    assert (tmp_path / "bench_tc_bandwidth_r.png").stat().st_size > 0
    monkeypatch.setattr(bench, "plot", lambda rows, path: None)  # (drawn above; the tables below)
    # --pool: more runs of the case in a later file are runs of the same case
    later = [row(config="teleportation-4-k2", measured_s_per_round=m, repeat=i) for i, m in enumerate((0.14, 0.16))]
    (tmp_path / "bench_tc_bandwidth_s.json").write_text(json.dumps({"rows": [bench.with_ratios(r) for r in later]}))
    files = [str(tmp_path / f"bench_tc_bandwidth_{n}.json") for n in "rs"]
    assert bench.plot_results(files, tmp_path, "rs", pool=True) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| 0.5 MB")]
    assert "| 1.50 (1.12-2.00) |" in line  # 0.12 / 0.08 of 0.09, 0.1, 0.12, 0.14, 0.16
    # runs with other flags (another problem) are another case, named by their flags
    other = [dict(r, run_flags="--sigma2 0", measured_s_per_round=0.088) for r in later]
    (tmp_path / "bench_tc_bandwidth_t.json").write_text(json.dumps({"rows": [bench.with_ratios(r) for r in other]}))
    assert bench.plot_results([*files, str(tmp_path / "bench_tc_bandwidth_t.json")], tmp_path, "rst", pool=True) == 0
    table = capsys.readouterr().out
    assert "| openmpi --sigma2 0: measured / bound |" in table
    (line,) = [x for x in table.splitlines() if x.startswith("| 0.5 MB")]
    assert line.endswith("| 1.10 (1.10-1.10) | 1.04 (1.04-1.04) | - | 1.02 (1.02-1.02) |")


def test_repeat_takes_one_run_or_more(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["--repeat", "0"])
    assert stop.value.code == 2
    assert "--repeat takes a number of runs, 1 or more, not 0" in capsys.readouterr().err


def test_every_case_gets_its_bare_exchange(monkeypatch):
    # DSGD: the ring exchange back to back; Teleportation: its own rounds chained
    calls = []
    monkeypatch.setattr(bench, "bare_mpi_s_per_round", lambda *a: calls.append(("ring", a)) or 1.0)
    monkeypatch.setattr(bench, "bare_chain_s_per_round", lambda *a: calls.append(("chain", a)) or 2.0)
    assert bench.bare_s_per_round("py", "dsgd-4-ring", 4, DIM, None, 5, 20) == 1.0
    assert bench.bare_s_per_round("py", "teleportation-4-k2", 4, DIM, None, 5, 20) == 2.0
    assert calls == [("ring", ("py", 4, 8 * DIM, None)),
                     ("chain", ("py", "teleportation-4-k2", 4, DIM, None, 5, 20))]


def test_rows_are_written_with_every_key_and_the_tc_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("NETNS_QUEUE", "20ms")
    monkeypatch.delenv("NETNS_BURST", raising=False)
    monkeypatch.delenv("NETNS_SHAPER", raising=False)
    bench.write_rows(tmp_path, "x", [{"a": 1}, {"a": 2, "b": 3}], {"tc": bench.tc_setting()})
    assert (tmp_path / "x.csv").read_text().splitlines() == ["a,b", "1,", "2,3"]
    saved = json.loads((tmp_path / "x.json").read_text())
    assert saved["rows"] == [{"a": 1}, {"a": 2, "b": 3}]
    assert saved["tc"].startswith("htb rate RATE burst 64kb, a 20ms byte FIFO")
    monkeypatch.setenv("NETNS_SHAPER", "tbf")  # the older token bucket
    assert "tbf rate RATE burst 64kb latency 20ms" in bench.tc_setting()


def test_plain_tcp_rounds_move_every_message_of_the_plan_in_its_round(tmp_path):
    # TCP_ROUNDS without the bed: 4 processes on this machine's loopback ("hosts" 0 and 1
    # both 127.0.0.1), the plan's first 8 rounds; every message is stamped once, in its
    # round, the receive ends after the send was called, and a round's senders start only
    # after their previous round (the chain). Each process listens on a port the system
    # gives it (no fixed port another job may hold) and says which in tmp_path.
    import subprocess

    plan = bench.round_pairs("teleportation-4-k2", 4, DIM, 0, 8)
    procs = [subprocess.Popen([sys.executable, "-c", bench.TCP_ROUNDS, str(r), "4", "2", "4096", "2",
                               json.dumps(plan), "127.0.0.1,127.0.0.1", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
             for r in range(4)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    assert float(outs[0].splitlines()[0]) > 0
    stamps = [s for o in outs for line in o.splitlines() if line.startswith("EV ") for s in json.loads(line[3:])]
    for kind in ("send", "recv"):
        got = sorted((t, s, d) for k, t, s, d, *_ in stamps if k == kind)
        assert got == sorted((t, s, d) for t, one in enumerate(plan) for s, d in one)
    sent = {(t, s, d): a for k, t, s, d, a, _ in stamps if k == "send"}
    done = {(t, s, d): b for k, t, s, d, _, b in stamps if k == "recv"}
    assert all(done[m] >= sent[m] for m in sent)
    for t in range(1, len(plan)):
        for s, d in plan[t]:  # s received in round t - 1 (it held then) before it sends now
            before = [done[m] for m in done if m[0] == t - 1 and m[2] == s]
            assert all(sent[t, s, d] >= b for b in before)


def test_plain_tcp_rounds_say_in_one_line_when_a_peer_cannot_be_reached(tmp_path):
    """A rank whose peer said a port nobody listens on ends with one line naming it (not a
    NameError); the port is one the system just gave out and took back."""
    import socket
    import subprocess

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed = probe.getsockname()[1]
    probe.close()
    (tmp_path / "port-0").write_text(str(closed))
    script = bench.TCP_ROUNDS.replace("range(400)", "range(3)")  # (give up at once)
    proc = subprocess.run([sys.executable, "-c", script, "1", "2", "1", "64", "0", "[[]]",
                           "127.0.0.1,127.0.0.1", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "NameError" not in proc.stderr
    assert proc.stderr.strip() == f"rank 1: cannot connect to rank 0 at 127.0.0.1:{closed}"


def test_the_trace_reads_rounds_in_message_times():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_tc_trace as trace

    first = trace.FIRST
    plan = [[]] * first + [[[0, 2], [3, 1], [0, 1]]]
    stamps = [("send", first, 0, 2, 10.0, 10.0), ("recv", first, 0, 2, 10.1, 11.0),
              ("send", first, 3, 1, 10.5, 10.5), ("recv", first, 3, 1, 10.6, 12.0),
              ("send", first, 0, 1, 10.0, 10.0), ("recv", first, 0, 1, 10.0, 10.2)]
    (row,) = trace.rounds_of(stamps, plan, message_s=1.0)
    assert (row["a_to_b"], row["b_to_a"], row["round_in_messages"]) == (1, 1, 2.0)
    assert row["messages"] == [{"from": 0, "to": 2, "sent": 0.0, "in": 1.0},
                               {"from": 3, "to": 1, "sent": 0.5, "in": 2.0}]
    assert trace.cpu_split([0, 0, 0, 10, 0, 0, 0], [5, 0, 5, 20, 0, 0, 10]) == {
        "user": 0.167, "nice": 0.0, "system": 0.167, "idle": 0.333, "iowait": 0.0, "irq": 0.0,
        "softirq": 0.333}


def test_a_traced_runs_steps_against_their_median():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_tc_trace as trace

    # rounds 1 and 2 of two ranks, timed from round 0's end at its last rank (0.021 s:
    # rank 1 started round 1 early, which does not count): steps of 1 ms but one of 10 ms
    # (2 ms of it on a core)
    stamps = [("round", 0, 0, 0.000, 0.005, 0.0), ("round", 0, 1, 0.000, 0.021, 0.0),
              ("round", 1, 0, 0.005, 0.030, 0.0), ("round", 1, 1, 0.021, 0.041, 0.0),
              ("round", 2, 0, 0.030, 0.050, 0.0), ("round", 2, 1, 0.041, 0.081, 0.0),
              ("step", 1, 0, 0.005, 0.006, 0.001), ("step", 1, 1, 0.021, 0.022, 0.001),
              ("step", 2, 0, 0.030, 0.031, 0.001), ("step", 2, 1, 0.041, 0.051, 0.002)]
    got = trace.run_steps(stamps, 1, 3)
    assert abs(got["s_per_round"] - 0.030) < 1e-12
    assert abs(got["step_median_s"] - 0.001) < 1e-12 and abs(got["step_max_s"] - 0.010) < 1e-12
    assert got["rounds_with_a_step_over_3x_median"] == 1
    assert abs(got["slow_steps_s"] - 0.010) < 1e-12 and abs(got["slow_steps_cpu_s"] - 0.002) < 1e-12
    assert abs(got["slow_steps_add_s_per_round"] - 0.0045) < 1e-12  # (0 + 9 ms) / 2 rounds


def test_a_traced_runs_cpu_is_told_apart_by_what_the_ranks_did():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_tc_trace as trace

    # (what, round, rank, start, end, CPU seconds): rounds 1-2 span 2 s on two ranks
    stamps = [("round", 1, 0, 0.0, 1.0, 0.9), ("round", 2, 0, 1.0, 2.0, 1.0),
              ("round", 1, 1, 0.0, 1.0, 0.5), ("round", 2, 1, 1.0, 2.0, 0.8),
              ("step", 1, 0, 0.0, 0.1, 0.1), ("step", 2, 1, 1.0, 1.3, 0.2),
              ("meanwhile", 1, 1, 0.1, 0.9, 0.4),  # a draw that waited half its time
              ("sum", 2, 0, 1.1, 1.9, 0.7), ("wait", 2, 0, 1.1, 1.6, 0.5),  # 0.2 s summing
              ("wait", 1, 0, 0.1, 0.9, 0.6),  # a wait outside a sum
              ("round", 0, 0, -1.0, 0.0, 1.0), ("meanwhile", 3, 1, 2.0, 3.0, 1.0)]  # outside
    got = trace.cores_used(stamps, 1, 3)
    assert got == pytest.approx({"draws": 0.4 / 2, "steps": 0.3 / 2, "sums": (0.7 - 0.5) / 2,
                                 "waits": 1.1 / 2, "rounds": 3.2 / 2, "draws_wall_over_cpu": 0.8 / 0.4})
    assert trace.cores_used(stamps[:4], 1, 3)["draws_wall_over_cpu"] is None


def test_a_traced_runs_links_are_busy_for_the_union_of_their_messages():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_tc_trace as trace

    # round 0: 0 -> 2 and 1 -> 3 cross A -> B (sent at 1 and 2 s, in at 4 and 5 s), 2 -> 0
    # crosses back (sent at 6, in at 7: rank 0's round, it waited for nothing); round 1
    # (0 -> 1 within host A) is outside the window
    plan = [[[0, 2], [1, 3], [2, 0]], [[0, 1]]]
    stamps = [("step", 0, 0, 0, 1, 0), ("step", 0, 1, 0, 2, 0), ("step", 0, 2, 5, 6, 0),
              ("wait", 0, 2, 1, 4, 0), ("wait", 0, 3, 1, 5, 0), ("round", 0, 0, 0, 7, 0)]
    assert trace.links_busy(stamps, plan, 0, 1) == {"a_to_b": {"messages": 2, "busy_s": 4},
                                                     "b_to_a": {"messages": 1, "busy_s": 1}}


def test_a_traced_run_is_drawn(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_tc_trace as trace

    stamps = [("round", t, r, 0.01 * t, 0.01 * t + 0.01, 0.0) for t in range(3) for r in range(4)]
    stamps += [("step", 1, 0, 0.010, 0.011, 0.001), ("wait", 1, 2, 0.011, 0.019, 0.0),
               ("meanwhile", 2, 3, 0.020, 0.025, 0.005), ("sum", 2, 1, 0.028, 0.029, 0.001)]
    run = {"implementation": "mpich", "flags": [], "dim": DIM, "rate_mbit": 400.0, "first_round": 1,
           "last_round": 3, "s_per_round": 0.01, "over_bound": 1.1, "stamps": stamps}
    trace.plot_runs([run, dict(run, implementation="openmpi")], tmp_path / "runs.png")
    import matplotlib.image

    image = matplotlib.image.imread(tmp_path / "runs.png")[..., :3]
    # the lower panel (the second run's; the legend sits in the upper one) shows every kind
    pixels = (image[image.shape[0] // 2:] * 255).round().astype(int).reshape(-1, 3)
    for colour in ("#d62728", "#9ecae1", "#bdbdbd", "#2ca02c"):  # step, wait, meanwhile, sum
        rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
        assert (np.abs(pixels - rgb).max(axis=1) <= 2).any(), colour


def test_pipeline_env_sets_the_block_for_the_runs_inside_and_puts_it_back(monkeypatch):
    """``--pipeline 0,1048576`` runs each case unpipelined and pipelined, one after the
    other: the ranks read MPI_TELEPORT_PIPELINE_BYTES (forwarded by the launcher)."""
    import os

    from mpi_teleport.launch import FORWARDED_ENV

    assert "MPI_TELEPORT_PIPELINE_BYTES" in FORWARDED_ENV  # (Open MPI hands on only these)
    monkeypatch.delenv("MPI_TELEPORT_PIPELINE_BYTES", raising=False)
    with bench.pipeline_env(0):
        assert os.environ["MPI_TELEPORT_PIPELINE_BYTES"] == "0"
    assert "MPI_TELEPORT_PIPELINE_BYTES" not in os.environ
    monkeypatch.setenv("MPI_TELEPORT_PIPELINE_BYTES", "4096")
    with bench.pipeline_env(1 << 20):
        assert os.environ["MPI_TELEPORT_PIPELINE_BYTES"] == str(1 << 20)
    with bench.pipeline_env(None):  # the transport's own
        assert os.environ["MPI_TELEPORT_PIPELINE_BYTES"] == "4096"
    assert os.environ["MPI_TELEPORT_PIPELINE_BYTES"] == "4096"
