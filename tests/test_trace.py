"""The timeline (issue 48, mpi_teleport/trace): a traced run writes one Chrome trace-event
file (every process present, spans nested and non-negative, every round tagged,
computation and communication told apart), its records are those of the run untraced,
bit for bit, the summary reads it, and a signal's stop or a kill after a checkpoint
leaves a readable trace. Simulator in process; MPI through mpirun under a hard timeout."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.trace import chrome, spans as sp, summary
from mpi_teleport.trace import tracer as tracing
from mpi_teleport.trace.__main__ import main as trace_main

from helpers import without_time

ROOT = Path(__file__).resolve().parents[1]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_trace(path: Path, processes, rounds, by: str = "rank") -> dict:
    """The file is trace-event JSON as viewers read it: complete events with a name,
    category, pid, tid, non-negative ts and dur, args round/node/token; per process the
    spans nest (by start, the longer first: each starts at or after its parent and ends
    by its end); every process named; every round in ``rounds`` has a round span on
    some process; both computation and communication are present. Returns the data."""
    data = chrome.load(path)
    events = data["traceEvents"]
    named = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    spans = [e for e in events if e["ph"] == "X"]
    assert set(processes) <= {e["pid"] for e in spans} <= named
    assert data["otherData"]["processes"] == by
    for e in spans:
        assert e["ts"] >= 0 and e["dur"] >= 0, e
        assert e["name"] in sp.KINDS and e["cat"] == sp.category(e["name"]), e
        assert {"round", "node", "token"} <= set(e["args"]), e
        assert e["tid"] == 0
    for pid in processes:
        mine = sorted((e for e in spans if e["pid"] == pid), key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in mine:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            if stack:  # nested: it ends within its parent (to the nanosecond of rounding)
                parent = stack[-1]
                assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 2e-3, (e, parent)
                assert e["args"]["round"] == parent["args"]["round"], (e, parent)
            stack.append(e)
    assert {e["args"]["round"] for e in spans if e["name"] == "round"} == set(rounds)
    cats = {e["cat"] for e in spans}
    assert {"computation", "communication"} <= cats or data["otherData"]["clock"].startswith(
        "virtual") and "computation" in cats
    return data


# ------------------------------------------------------------------- the span buffer
def test_spans_sample_rounds_and_drop_what_does_not_fit():
    s = sp.Spans(capacity=3, rounds=2, every=3, first=10)
    assert [t for t in range(5, 30) if s.wants(t)] == [10, 13]
    assert s.at(11) is None and s.at(13, token=4) is s and (s.round, s.token) == (13, 4)
    for i in range(5):
        s.add(sp.STEP, float(i), float(i) + 0.5)
    assert s.n == 3 and s.dropped == 2
    rows = s.recorded()
    assert rows["round"].tolist() == [13, 13, 13] and rows["token"].tolist() == [4, 4, 4]
    assert sp.capacity_for(rounds=1000, every=1, total_rounds=10) == 11 * sp.SPANS_PER_ROUND + sp.BOUNDARY_SPANS


def test_limits_from_the_environment_and_their_refusal():
    assert tracing.limits_from_env({}) == (tracing.ROUNDS, 1)
    assert tracing.limits_from_env({tracing.ROUNDS_ENV: "50", tracing.EVERY_ENV: "4"}) == (50, 4)
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(mt.UsageError, match=tracing.EVERY_ENV):
            tracing.limits_from_env({tracing.EVERY_ENV: bad})
    assert tracing.path_from_env({}) is None
    assert tracing.path_from_env({tracing.TRACE_ENV: "t.json"}) == Path("t.json")


def _fake_torch(available: bool, initialised: bool):
    nvtx = types.SimpleNamespace(pushed=[], range_push=None, range_pop=None)
    nvtx.range_push = lambda name: nvtx.pushed.append(name)
    nvtx.range_pop = lambda: nvtx.pushed.append("pop")
    cuda = types.SimpleNamespace(is_available=lambda: available,
                                 is_initialized=lambda: initialised, nvtx=nvtx)
    return types.SimpleNamespace(cuda=cuda), nvtx


@pytest.mark.parametrize("available,initialised,chosen", [
    (True, True, True), (True, False, False), (False, False, False)])
def test_nvtx_ranges_only_where_torch_uses_cuda(available, initialised, chosen):
    """NVTX is chosen once, where torch is imported and CUDA initialised (no GPU here: the
    selection with a stand-in torch); never by importing torch."""
    torch, nvtx = _fake_torch(available, initialised)
    assert sp.nvtx_module({}) is None  # (torch not imported: not imported here either)
    assert (sp.nvtx_module({"torch": torch}) is nvtx) == chosen
    s = sp.make_spans(10, 1, 10, nvtx=sp.nvtx_module({"torch": torch}))
    assert isinstance(s, sp.NvtxSpans) == chosen
    a = s.begin(sp.SUM)
    s.end(sp.SUM, a)
    s.begin(sp.ROUND)
    s.cancel(sp.ROUND)  # (an idle rank's round: its range closed, nothing recorded)
    assert nvtx.pushed == (["sum", "pop", "round", "pop"] if chosen else [])
    assert s.n == 1


def test_a_broken_torch_gives_no_ranges():
    def broken():
        raise RuntimeError("no CUDA in this build")

    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=broken))
    assert sp.nvtx_module({"torch": torch}) is None


# ------------------------------------------------------------------- the simulator
def _sim(tmp_path, name, monkeypatch, trace=True, **kwargs):
    if trace:
        monkeypatch.setenv(tracing.TRACE_ENV, str(tmp_path / f"{name}.json"))
    else:
        monkeypatch.delenv(tracing.TRACE_ENV, raising=False)
    settings = dict(nodes=6, k=3, rounds=12, lr=0.01, log_every=4, seed=3, momentum=0.5)
    settings.update(kwargs)
    return mt.teleportation(Quadratic(n=6, d=5, seed=2), out=tmp_path / name, **settings)


def test_a_simulator_trace_is_valid_and_leaves_the_records_alone(tmp_path, monkeypatch):
    plain = _sim(tmp_path, "plain", monkeypatch, trace=False)
    traced = _sim(tmp_path, "traced", monkeypatch)
    assert without_time(traced.records) == without_time(plain.records)
    assert np.array_equal(traced.x, plain.x)
    assert (without_time(read_jsonl(tmp_path / "traced" / "metrics.jsonl"))
            == without_time(read_jsonl(tmp_path / "plain" / "metrics.jsonl")))
    data = check_trace(tmp_path / "traced.json", processes=[0], rounds=range(12), by="node")
    active = {e["pid"] for e in data["traceEvents"] if e["ph"] == "X" and e["name"] == "step"}
    assert active <= set(range(6)) and len(active) >= 3
    assert not (tmp_path / "traced.json.parts").exists()  # (removed by the final write)


def test_the_virtual_clock_trace_is_the_oracles_time(tmp_path, monkeypatch):
    """Under the virtual clock the simulator's nodes are on their logical clocks: the
    latest span ends at the run's virtual_time_s, and each step lasts the compute time."""
    result = _sim(tmp_path, "virtual", monkeypatch, latency="const:100", compute_time=30)
    data = check_trace(tmp_path / "virtual.json", processes=[], rounds=range(12), by="node")
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert data["otherData"]["clock"].startswith("virtual")
    assert {e["pid"] for e in spans} == set(range(6))
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(result.records[-1]["virtual_time_s"] * 1e6, abs=1e-2)
    assert {round(e["dur"], 3) for e in spans if e["name"] == "step"} == {30.0}
    assert any(e["name"] == "wait" and e["dur"] > 0 for e in spans)


def test_two_runs_of_one_process_write_two_files(tmp_path, monkeypatch):
    monkeypatch.setenv(tracing.TRACE_ENV, str(tmp_path / "t.json"))
    monkeypatch.setattr(tracing, "_written", set())
    mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=3, lr=0.01)
    mt.dsgd(Quadratic(n=4, d=3), nodes=4, rounds=3, lr=0.01)
    assert (tmp_path / "t.json").exists() and (tmp_path / "t-dsgd.json").exists()


def test_the_summary_reads_a_trace_draws_it_and_compares(tmp_path, monkeypatch, capsys):
    _sim(tmp_path, "a", monkeypatch)
    _sim(tmp_path, "b", monkeypatch, latency="const:100", compute_time=30)
    pytest.importorskip("matplotlib")
    assert trace_main([str(tmp_path / "a.json"), "--png", str(tmp_path / "a.png"),
                       "--compare", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "6 nodes, 12 rounds recorded" in out and "typical round" in out
    assert "share" in out and "step" in out and "sum/run" not in out and "sim/run" in out
    assert (tmp_path / "a.png").stat().st_size > 1000
    assert trace_main([str(tmp_path / "missing.json")]) == 2


def test_summary_numbers_on_a_made_up_trace():
    """Two ranks, two rounds: the own times, the round lengths, the critical path and the
    ranks that waited, by hand."""
    def x(pid, name, ts, dur, r):
        return {"ph": "X", "pid": pid, "tid": 0, "name": name, "cat": sp.category(name),
                "ts": ts, "dur": dur, "args": {"round": r, "node": pid, "token": 0}}

    events = [x(0, "round", 0, 10, 0), x(0, "step", 0, 4, 0), x(0, "gradient", 0, 3, 0),
              x(0, "send", 4, 1, 0), x(0, "wait", 5, 5, 0),
              x(1, "round", 0, 12, 0), x(1, "wait", 0, 11, 0), x(1, "sum", 11, 1, 0),
              x(0, "round", 10, 6, 1), x(0, "step", 10, 6, 1),
              x(1, "round", 12, 2, 1), x(1, "sum", 12, 2, 1)]
    trace = summary.read({"traceEvents": events, "otherData": {"processes": "rank"}})
    parts = summary.per_part(trace)
    assert parts["step (optimizer)"] == {0: 1.0} and parts["gradient"] == {0: 3.0}
    assert parts["wait"] == {0: 5.0, 1: 11.0} and parts["round (rest)"] == {0: 0.0, 1: 0.0}
    assert summary.round_lengths(trace) == {0: 12.0, 1: 4.0}
    path = summary.critical_path(trace, 0)
    assert [(pid, part.split(" ")[0]) for pid, part, _ in path] == [
        (0, "step"), (0, "send"), (1, "wait"), (1, "sum")]
    assert path[2][2] == 6.0  # rank 1 waited 6 us past rank 0's send
    assert summary.waited_most(trace)[0][:2] == (1, 11.0)


def test_a_killed_simulator_keeps_the_trace_of_its_last_checkpoint(tmp_path):
    """SIGKILL after a checkpoint: the trace written with it stays readable, and --merge
    rebuilds it from the part files (the ones that checkpoint wrote)."""
    trace = tmp_path / "t.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPI_TELEPORT_TRACE=str(trace),
               OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "mpi_teleport.sim", "--nodes", "4", "--k", "2",
                             "--algorithm", "teleportation", "--rounds", "100000000",
                             "--log-every", "50", "--checkpoint-every", "100", "--dim", "5",
                             "--progress", "off", "--out", str(tmp_path / "run")],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not trace.exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    data = chrome.load(trace)
    rounds = {e["args"]["round"] for e in data["traceEvents"] if e["ph"] == "X"}
    assert rounds and min(rounds) == 0 and max(rounds) % 100 == 0
    assert trace_main([str(trace), "--merge"]) == 0


# ------------------------------------------------------------------- MPI
MPI_ARGS = ["--algorithm", "teleportation", "--k", "2", "--rounds", "12", "--log-every", "4",
            "--dim", "6", "--momentum", "0.5", "--seed", "4", "--progress", "off"]


def _mpi(tmp_path, name, trace: bool, extra=(), timeout=240, cpu=False):
    from conftest import run_mpi

    env = dict(os.environ)
    env.pop(tracing.TRACE_ENV, None)
    env.pop(tracing.CPU_ENV, None)
    if trace:
        env[tracing.TRACE_ENV] = str(tmp_path / f"{name}.json")
    if cpu:
        env[tracing.CPU_ENV] = "1"
    args = ["-m", "mpi_teleport.run", *MPI_ARGS, "--out", str(tmp_path / name), *extra]
    res = run_mpi(4, args, timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def test_a_4_rank_mpi_trace_is_valid_and_leaves_the_records_alone(tmp_path):
    """Compiled rounds (the default) with a checkpoint midway and CPU times, and the round
    executor (under the latency layer): every rank, every round; the records bit for bit
    those of the run untraced (the simulator's: MPI equals it, tests/test_mpi.py)."""
    from mpi_teleport.sim import main as sim_main

    env_before = os.environ.pop(tracing.TRACE_ENV, None)
    try:
        assert sim_main(["--nodes", "4", *MPI_ARGS, "--out", str(tmp_path / "plain")]) == 0
    finally:
        if env_before is not None:
            os.environ[tracing.TRACE_ENV] = env_before
    _mpi(tmp_path, "traced", trace=False, cpu=True,  # (the flag: --trace)
         extra=["--checkpoint-every", "6", "--trace", str(tmp_path / "traced.json")])
    _mpi(tmp_path, "layer", trace=True, extra=["--latency", "const:50", "--clock", "virtual",
                                                "--compute-time", "20"])
    plain = without_time(read_jsonl(tmp_path / "plain" / "metrics.jsonl"))
    assert without_time(read_jsonl(tmp_path / "traced" / "metrics.jsonl")) == plain
    layer = [{k: v for k, v in r.items() if k != "virtual_time_s"}  # (latency: time, not numbers)
             for r in without_time(read_jsonl(tmp_path / "layer" / "metrics.jsonl"))]
    assert layer == plain
    for name in ("traced", "layer"):
        data = check_trace(tmp_path / f"{name}.json", processes=range(4), rounds=range(12))
        spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
        names = {e["name"] for e in spans}
        assert {"round", "step", "gradient", "send", "wait", "sum", "log", "evaluate",
                "barrier", "gather"} <= names, names
        assert set(data["otherData"]["offsets_s"]) == {"0", "1", "2", "3"}
        for r in range(12):  # every round on the ranks that take part in it (k = 2 hold a
            # token; an idle rank records nothing of a round)
            assert len({e["pid"] for e in spans if e["name"] == "round" and e["args"]["round"] == r}) >= 2
    names = {e["name"] for e in chrome.load(tmp_path / "traced.json")["traceEvents"]}
    assert "checkpoint" in names
    check_bench_stamps(chrome.load(tmp_path / "traced.json"))  # (with CPU times)
    text = summary.report(summary.read(chrome.load(tmp_path / "traced.json")))
    assert text.startswith("4 ranks, 12 rounds recorded") and "waited most" in text
    assert not (tmp_path / "traced.json.parts").exists()


def test_a_sigterm_leaves_the_trace_up_to_the_checkpoint_mpi(tmp_path):
    from launch_helpers import this_venv_impl
    from test_failures import finish, kill_job, rank_pids, start_mpi, wait_for

    trace = tmp_path / "t.json"
    os.environ[tracing.TRACE_ENV] = str(trace)  # (start_mpi passes this environment on)
    try:
        proc = start_mpi(2, ["-m", "mpi_teleport.run", "--algorithm", "teleportation", "--k", "2",
                             "--rounds", "100000000", "--log-every", "20", "--dim", "5",
                             "--checkpoint-every", "40", "--progress", "off",
                             "--out", str(tmp_path / "run")], tmp_path, this_venv_impl())
    finally:
        del os.environ[tracing.TRACE_ENV]
    try:
        wait_for(trace, timeout=180)  # (the first checkpoint's)
        for pid in rank_pids(proc, 2):
            os.kill(pid, signal.SIGTERM)
        status, err = finish(proc, tmp_path, timeout=120)
    finally:
        kill_job(proc)
    assert status == 75, err[-2000:]
    from mpi_teleport import checkpoint

    _, manifest = checkpoint.locate(tmp_path / "run")
    data = chrome.load(trace)
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1}
    rounds = [e["args"]["round"] for e in spans if e["name"] == "round"]
    assert min(rounds) == 0 and max(rounds) == manifest["round"] - 1  # up to the signal's checkpoint
    assert not (tmp_path / "t.json.parts").exists()


def test_an_elastic_simulation_traces_its_agreements_and_its_recovery(tmp_path, monkeypatch):
    """A node lost at round 7 (the simulator's failure plan): the boundaries' keeping and
    agreement, the recovery, and round 7 twice (before the loss was seen, and redone)."""
    _sim(tmp_path, "elastic", monkeypatch, nodes=6, k=2, fail="3@7")
    data = chrome.load(tmp_path / "elastic.json")
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    names = {e["name"] for e in spans}
    assert {"keep", "agree", "recover"} <= names
    assert [e["args"]["round"] for e in spans if e["name"] == "recover"] == [7]
    rounds = [e["args"]["round"] for e in spans if e["name"] == "round"]
    assert sorted(set(rounds)) == list(range(12))
    assert rounds.count(7) == 2 * rounds.count(6)  # (k holders each time: done, then redone)


def test_cpu_spans_record_the_threads_cpu_time():
    s = sp.make_spans(5, 1, 5, cpu=True)
    assert isinstance(s, sp.CpuSpans)
    s.at(0)
    a = s.begin(sp.STEP)
    b = s.begin(sp.GRADIENT)
    sum(i * i for i in range(20000))  # (some CPU)
    s.end(sp.GRADIENT, b)
    s.end(sp.STEP, a)
    rows = s.recorded()
    assert rows["kind"].tolist() == [sp.GRADIENT, sp.STEP]
    assert (rows["cpu"] > 0).all() and rows["cpu"][1] >= rows["cpu"][0]
    with pytest.raises(mt.UsageError, match=tracing.CPU_ENV):
        tracing.cpu_from_env({tracing.CPU_ENV: "yes"})
    assert tracing.cpu_from_env({tracing.CPU_ENV: "1"}) and not tracing.cpu_from_env({})


def check_bench_stamps(data: dict) -> None:
    """bench_tc_trace reads a trace with CPU times as its stamps (what its analyses take)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_tc_trace

    steps = [e for e in data["traceEvents"] if e["ph"] == "X" and e["name"] == "step"]
    assert steps and all(e["args"]["cpu_us"] >= 0 for e in steps)
    stamps = bench_tc_trace.stamps_of_trace(data)
    assert {"round", "step", "sum", "wait", "meanwhile"} <= {s[0] for s in stamps}
    step = next(s for s in stamps if s[0] == "step")
    assert step[1:3] == (steps[0]["args"]["round"], steps[0]["pid"])
    assert step[3:] == pytest.approx((steps[0]["ts"] / 1e6, (steps[0]["ts"] + steps[0]["dur"]) / 1e6,
                                      steps[0]["args"]["cpu_us"] / 1e6), abs=1e-12)
    got = bench_tc_trace.run_steps(stamps, 2, 11)
    assert got["step_median_s"] >= 0 and got["s_per_round"] > 0
    assert bench_tc_trace.cores_used(stamps, 2, 11)["rounds"] > 0


def test_a_hot_spare_joins_the_trace_of_the_rank_it_replaces_mpi(tmp_path):
    """Elastic, 4 nodes and a spare, node 1 killed at round 12 after a checkpoint at 10:
    the dead rank's spans up to the checkpoint and the spare's from its join share row 1,
    the survivors record their recovery, and the records still equal the simulator's."""
    from test_elastic_mpi import records
    from test_spares_mpi import simulated, spare_run

    trace = tmp_path / "t.json"
    args = ["--algorithm", "teleportation", "--k", "2", "--checkpoint-every", "5"]
    res, out = spare_run(tmp_path, 4, 1, args, "1@12", extra_env={tracing.TRACE_ENV: str(trace)})
    assert res.returncode == 0, res.stderr[-3000:]
    code, sim = simulated(tmp_path, 4, 1, args, ["1@12"])
    assert code == 0 and records(out / "metrics.jsonl") == records(sim / "metrics.jsonl")
    spans = [e for e in chrome.load(trace)["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1, 2, 3}
    row1 = sorted({e["args"]["round"] for e in spans if e["pid"] == 1 and e["name"] == "round"})
    assert row1[0] == 0 and row1[-1] == 23 and 12 in row1  # (before the loss, and the spare's)
    assert [e["pid"] for e in spans if e["name"] == "join"] == [1]
    assert {e["pid"] for e in spans if e["name"] == "recover"} == {0, 1, 2, 3}


def test_the_simulators_buffer_holds_every_active_nodes_spans(tmp_path, monkeypatch):
    """120 tokens a round: the simulator's buffer is sized by its active nodes (3 spans
    each a round), not by one process's round, so nothing is dropped."""
    monkeypatch.setenv(tracing.TRACE_ENV, str(tmp_path / "wide.json"))
    mt.teleportation(Quadratic(n=300, d=2, seed=1), nodes=300, k=120, rounds=30, lr=0.01)
    data = chrome.load(tmp_path / "wide.json")
    assert not data["otherData"]["dropped"]
    steps = [e for e in data["traceEvents"] if e["ph"] == "X" and e["name"] == "step"]
    assert len(steps) == 30 * 120


@pytest.mark.parametrize("where", ["a-directory", "missing/../../proc/no/t.json"])
def test_a_trace_that_cannot_be_written_is_refused_before_the_first_round(tmp_path, monkeypatch,
                                                                           where):
    path = tmp_path / "a-directory"
    path.mkdir()
    target = path if where == "a-directory" else Path("/proc/no/t.json")
    monkeypatch.setenv(tracing.TRACE_ENV, str(target))
    with pytest.raises(mt.UsageError, match="cannot write there") as got:
        mt.teleportation(Quadratic(n=4, d=2), nodes=4, k=2, rounds=3, lr=0.01)
    assert "\n" not in str(got.value)


def test_the_trace_setting_on_the_command_line_and_in_the_api(tmp_path, monkeypatch):
    """--trace PATH (recorded in config.json) and trace= write the file as the variable
    does; an empty or non-path value is one line."""
    from mpi_teleport.sim import main as sim_main

    monkeypatch.delenv(tracing.TRACE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert sim_main(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "6",
                     "--out", "cli", "--trace", "cli.json", "--progress", "off"]) == 0
    check_trace(tmp_path / "cli.json", [], range(6), by="node")
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["trace"] == "cli.json"
    result = mt.teleportation(Quadratic(n=4, d=2), nodes=4, k=2, rounds=5, lr=0.01,
                              trace=tmp_path / "api.json", out=tmp_path / "api")
    check_trace(tmp_path / "api.json", [], range(5), by="node")
    assert json.loads((tmp_path / "api" / "config.json").read_text())["trace"] == str(
        tmp_path / "api.json")
    untraced = mt.teleportation(Quadratic(n=4, d=2), nodes=4, k=2, rounds=5, lr=0.01)
    assert without_time(result.records) == without_time(untraced.records)
    with pytest.raises(mt.UsageError, match="^trace: expected a path"):
        mt.teleportation(Quadratic(n=4, d=2), nodes=4, k=2, rounds=5, lr=0.01, trace=5)
    assert sim_main(["--nodes", "4", "--k", "2", "--rounds", "3", "--trace", ""]) == 2
