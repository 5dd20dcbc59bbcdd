"""Hot spares under MPI (issue 32): n + S ranks with ``--elastic --spares S``; a node's rank
SIGKILLed at a chosen round (tests' hook $MPI_TELEPORT_TEST_DIE=NODE@ROUND, see
tests/test_elastic_mpi.py; SPARE@0 kills a spare as it starts waiting) is taken over by
the lowest waiting spare, the job exits 0 and its records equal the simulator's told of
the same failures (``--fail ... --spares S``), bit for bit. Open MPI only (ULFM); MPICH
and plain mpirun refuse --spares in one line, as --elastic. Small rank counts, hard
timeouts."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import ROOT, LauncherOutlivedRanks, communicate, rank_stacks, run_mpi
from launch_helpers import kill_tagged, new_tag, this_venv_impl

from mpi_teleport.core import schedule
from mpi_teleport.sim import main as sim_main

from test_elastic_mpi import (BASE, EVERY, records, refused_under_mpich,  # (the elastic
                              refused_without_ulfm, summary)  # tests' runs and readers)


def spare_run(tmp_path, n, spares, args, die, timeout=120, name="mpi", extra_env=None):
    out = tmp_path / name
    env = {**os.environ, "MPI_TELEPORT_TEST_DIE": die,
           "MPI_TELEPORT_SPARE_LOG": str(tmp_path / f"{name}-spares"), **(extra_env or {})}
    res = run_mpi(n + spares, ["-m", "mpi_teleport.run", *BASE, *EVERY, *args, "--elastic",
                               "--spares", str(spares), "--out", str(out)],
                  timeout=timeout, env=env)
    return res, out


def simulated(tmp_path, n, spares, args, fails, name="sim"):
    out = tmp_path / name
    argv = ["--nodes", str(n), *BASE, *args, "--spares", str(spares), "--out", str(out)]
    for f in fails:
        argv += ["--fail", f]
    return sim_main(argv), out


def assert_equal_runs(tmp_path, n, spares, args, die, fails, extra_env=None):
    res, mpi = spare_run(tmp_path, n, spares, args, die, extra_env=extra_env)
    assert res.returncode == 0, res.stderr[-3000:]
    code, sim = simulated(tmp_path, n, spares, args, fails)
    assert code == 0
    assert records(mpi / "metrics.jsonl") == records(sim / "metrics.jsonl")
    assert summary(mpi / "summary.json") == summary(sim / "summary.json")
    return json.loads((mpi / "summary.json").read_text())


def waited(path, timeout=20):
    """A spare's account of its wait (mpirun may return while a released spare still
    writes it)."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return json.loads(path.read_text())


def holder_and_idle(n, k, r, seed=0):
    h = schedule.holders(seed, n, k, r)
    return int(h[0]), next(i for i in range(n) if i not in h)


@pytest.mark.parametrize("who, variant", [("holder", "overlap"), ("idle", "simple"),
                                          ("zero", "overlap")])
def test_a_killed_node_is_replaced_and_equals_the_simulator(tmp_path, who, variant):
    """An active holder (Alg. 3: its token restored as the mean), an idle node (Alg. 1),
    rank 0 (the root: the oldest survivor writes the files, the spare becomes node 0)."""
    holder, idle = holder_and_idle(4, 2, 7)
    node = {"holder": holder, "idle": idle, "zero": 0}[who]
    args = ["--algorithm", "teleportation", "--k", "2", "--variant", variant, "--momentum", "0.5"]
    s = assert_equal_runs(tmp_path, 4, 1, args, f"{node}@7", [f"{node}@7"])
    assert [(x["node"], x["round"], x["spare"]) for x in s["replaced"]] == [(node, 7, 4)]
    assert s["lost"] == [] and s["spares"] == 1
    if who == "holder":
        assert s["replaced"][0]["tokens"] == [0]
    assert waited(tmp_path / "mpi-spares" / "spare-4.json")["outcome"] == "node"


def test_two_kills_with_one_spare_the_first_replaced_the_second_lost(tmp_path):
    args = ["--algorithm", "teleportation", "--k", "2", "--momentum", "0.5"]
    s = assert_equal_runs(tmp_path, 4, 1, args, "3@4,1@13", ["3@4", "1@13"])
    assert [(x["node"], x["spare"]) for x in s["replaced"]] == [(3, 4)]
    assert [(x["node"], x["round"]) for x in s["lost"]] == [(1, 13)]


def test_the_node_a_spare_became_can_be_replaced_again(tmp_path):
    """Spare 4 becomes node 2 at round 4; that process dies at round 12 and spare 5 takes
    node 2 over in turn."""
    args = ["--algorithm", "teleportation", "--k", "2"]
    s = assert_equal_runs(tmp_path, 4, 2, args, "2@4,2@12", ["2@4", "4@12"])
    assert [(x["node"], x["round"], x["spare"]) for x in s["replaced"]] == [(2, 4, 4), (2, 12, 5)]


def test_a_spare_joins_at_the_last_agreement_with_agree_every(tmp_path):
    """--agree-every 8: node 2 killed at round 13 is taken over at round 8 (the last
    agreement), where the spare enters the survivors' recovery."""
    args = ["--algorithm", "teleportation", "--k", "2", "--agree-every", "8", "--rounds", "40",
            "--log-every", "20"]
    # (the spare redoes rounds 8-15 as node 2: the hook must not kill it at 13 again)
    s = assert_equal_runs(tmp_path, 4, 1, args, "2@13", ["2@8"],
                          {"MPI_TELEPORT_TEST_DIE_ONCE": str(tmp_path)})
    assert [(x["node"], x["round"], x["spare"]) for x in s["replaced"]] == [(2, 8, 4)]


def test_dsgd_replica_is_restored_on_the_spare(tmp_path):
    s = assert_equal_runs(tmp_path, 4, 1, ["--algorithm", "dsgd", "--momentum", "0.5"],
                          "2@9", ["2@9"])
    assert s["replaced"][0]["tokens"] == [2] and s["lost"] == []


def test_kill_at_a_logging_round_and_inside_a_checkpoint(tmp_path):
    """Round 10 is logged (the spare receives the records) and round 15's checkpoint loses
    a rank while it is written: both are redone with the spares."""
    args = ["--algorithm", "teleportation", "--k", "2", "--checkpoint-every", "15"]
    assert_equal_runs(tmp_path, 4, 2, args, "3@10,1@15:save", ["3@10", "1@15"])
    manifest = json.loads((tmp_path / "mpi" / "checkpoints" / "round-00000015" /
                           "MANIFEST.json").read_text())
    assert [(x["node"], x["round"], x["spare"]) for x in manifest["replaced"]] == \
        [(3, 10, 4), (1, 15, 5)]


def test_a_spare_killed_while_it_waits_is_gone(tmp_path):
    """Spare 4 dies as it starts waiting: node 1's death at round 7 is taken over by
    spare 5, as the simulator told of spare 4's death at round 0."""
    args = ["--algorithm", "teleportation", "--k", "2"]
    s = assert_equal_runs(tmp_path, 4, 2, args, "4@0,1@7", ["4@0", "1@7"])
    assert [(x["node"], x["spare"]) for x in s["replaced"]] == [(1, 5)]


def test_a_spare_killed_while_it_waits_and_no_node_dies(tmp_path):
    """Nothing in the run changes; the other spare is released at the end, exit 0."""
    args = ["--algorithm", "teleportation", "--k", "2"]
    s = assert_equal_runs(tmp_path, 4, 2, args, "4@0", ["4@0"])
    assert s["replaced"] == [] and s["lost"] == []
    assert waited(tmp_path / "mpi-spares" / "spare-5.json")["outcome"] == "done"


@pytest.mark.parametrize("resumed_spares", [0, 2])
def test_resume_after_a_replacement(tmp_path, resumed_spares):
    """A checkpoint after a replacement, resumed by a job with no spare or two: node 1 is
    in the run (its rank holds it again), and the records equal the uninterrupted run's."""
    args = ["--algorithm", "teleportation", "--k", "2", "--checkpoint-every", "10",
            "--keep-checkpoints", "5"]
    res, out = spare_run(tmp_path, 4, 1, args, "1@4")
    assert res.returncode == 0, res.stderr[-3000:]
    whole = records(out / "metrics.jsonl")
    assert whole[-1]["replaced"] == [[1, 4, 4]]
    resumed = run_mpi(4 + resumed_spares,
                      ["-m", "mpi_teleport.run", "--elastic", "--spares", str(resumed_spares),
                       "--resume", str(out / "checkpoints" / "round-00000010")], timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records(out / "metrics.jsonl") == whole
    code, sim = simulated(tmp_path, 4, 1, args, ["1@4"])
    assert code == 0 and records(sim / "metrics.jsonl") == whole


def test_every_holder_lost_with_a_spare_waiting_is_exit_75_and_the_spare_ends(tmp_path):
    """Both tokens' holders die at round 5: nothing to restore from, even with spares; the
    nodes end with exit 75 (one line) and release the spare still waiting (no hang)."""
    h = schedule.holders(0, 4, 2, 5)
    res, _ = spare_run(tmp_path, 4, 3, ["--algorithm", "teleportation", "--k", "2"],
                       f"{h[0]}@5,{h[1]}@5")
    lines = [line for line in res.stderr.splitlines() if "mpi_teleport.run" in line]
    assert res.returncode == 75, res.stderr[-3000:]
    assert len(lines) == 1 and "every token's holder was lost at round 5" in lines[0]
    assert waited(tmp_path / "mpi-spares" / "spare-6.json")["outcome"] == "done"


def test_idle_spares_use_next_to_no_cpu(tmp_path):
    """Two spares wait through a whole run (released at its end): their CPU time while
    waiting is a small fraction of the time they waited."""
    res, out = spare_run(tmp_path, 2, 2, ["--algorithm", "teleportation", "--k", "1",
                                          "--rounds", "3000", "--log-every", "1000"], "")
    assert res.returncode == 0, res.stderr[-3000:]
    for spare in (2, 3):
        account = waited(tmp_path / "mpi-spares" / f"spare-{spare}.json")
        assert account["outcome"] == "done"
        assert account["cpu_s"] < 0.05 * account["wait_s"] + 0.02, account


def test_spares_need_elastic(tmp_path):
    res = run_mpi(3, ["-m", "mpi_teleport.run", "--algorithm", "teleportation", "--k", "1",
                      "--rounds", "3", "--spares", "1"], timeout=120)
    lines = [line for line in res.stderr.splitlines() if "error" in line]
    assert res.returncode == 2 and len(lines) == 1 and "--spares needs --elastic" in lines[0]


def test_spares_refused_without_ulfm(tmp_path):
    """Plain mpirun (no --with-ft ulfm): one line, as --elastic, exit 2 (no spare left
    waiting)."""
    refused_without_ulfm(3, ["--elastic", "--spares", "1"])


def test_spares_refused_under_mpich():
    refused_under_mpich(3, ["--elastic", "--spares", "1"])


def test_digits_network_with_rank_0_replaced_equals_the_simulator(tmp_path):
    """The spare builds node 0's data shard (a built-in TorchProblem, float32 tokens, the
    evaluation shared by the ranks) and takes node 0 over."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    args = ["--problem", "digits", "--algorithm", "teleportation", "--k", "2", "--alpha", "0.5",
            "--momentum", "0.9", "--progress", "off", "--batch-size", "8"]
    out = tmp_path / "mpi"
    res = run_mpi(4, ["-m", "mpi_teleport.run", "--rounds", "12", "--log-every", "4",
                      "--lr", "0.05", *EVERY, *args, "--elastic", "--spares", "1", "--out",
                      str(out)],
                  timeout=300, env={**os.environ, "MPI_TELEPORT_TEST_DIE": "0@6"})
    assert res.returncode == 0, res.stderr[-3000:]
    sim = tmp_path / "sim"
    assert sim_main(["--nodes", "3", "--rounds", "12", "--log-every", "4", "--lr", "0.05", *args,
                     "--fail", "0@6", "--spares", "1", "--out", str(sim)]) == 0
    assert records(out / "metrics.jsonl") == records(sim / "metrics.jsonl")
    assert records(out / "metrics.jsonl")[-1]["replaced"] == [[0, 6, 3]]  # (the spare: rank 3)


def test_a_problem_factory_is_built_for_the_node_the_spare_becomes(tmp_path):
    """``--problem module:function``: the spare calls the factory as the dead rank did
    (its node's data) and the run equals the simulator's."""
    flags = ["--problem", "mpi_teleport.examples.logistic:problem", "--algorithm",
             "teleportation", "--k", "2", "--rounds", "20", "--lr", "0.5", "--log-every", "5"]
    holder = int(schedule.holders(0, 4, 2, 8)[1])
    out = tmp_path / "mpi"
    res = run_mpi(5, ["-m", "mpi_teleport.run", *flags, *EVERY, "--elastic", "--spares", "1",
                      "--out", str(out)], timeout=120,
                  env={**os.environ, "MPI_TELEPORT_TEST_DIE": f"{holder}@8"})
    assert res.returncode == 0, res.stderr[-3000:]
    sim = tmp_path / "sim"
    assert sim_main(["--nodes", "4", *flags, "--fail", f"{holder}@8", "--spares", "1",
                     "--out", str(sim)]) == 0
    assert records(out / "metrics.jsonl") == records(sim / "metrics.jsonl")
    assert records(out / "metrics.jsonl")[-1]["replaced"] == [[holder, 8, 4]]


def test_sigusr1_to_mpirun_checkpoints_and_ends_the_spares_too(tmp_path):
    """What the job scripts forward ahead of the time limit: the nodes write the signal's
    checkpoint and exit 75; the waiting spare does not leave before them (that would end
    the job under mpirun before the checkpoint) and is released with 75."""
    from mpi_teleport import checkpoint

    impl = this_venv_impl()
    out = tmp_path / "run"
    cmd = impl.command(5, ["-m", "mpi_teleport.run", "--algorithm", "teleportation", "--k", "2",
                           "--rounds", "100000000", "--lr", "0.01", "--log-every", "50",
                           "--dim", "8", "--elastic", "--spares", "1", "--checkpoint-every",
                           "10000000", "--out", str(out)])
    tag, spare_log = new_tag(), tmp_path / "spares"
    env = {**os.environ, "MPI_TELEPORT_SPARE_LOG": str(spare_log)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=impl.env(env, tag), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    launcher_hung = False
    try:
        deadline = time.monotonic() + 60
        while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(__import__("signal").SIGUSR1)
        try:
            _, err = communicate(proc, tag, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end within 60 s of SIGUSR1\n{rank_stacks(tag)}")
        except LauncherOutlivedRanks as hung:
            # PRRTE issue 1839 (here 2 of about 45 such runs under load): what the ranks
            # had to do is checked below all the same.
            launcher_hung, err = hung, hung.err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            kill_tagged(tag)
            proc.wait()
    ours = [line for line in err.splitlines() if "mpi_teleport.run: stopped by" in line]
    assert len(ours) == 1 and "stopped by SIGUSR1" in ours[0], err[-3000:]
    _, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal"
    waits = [json.loads(p.read_text()) for p in spare_log.glob("spare-*.json")]
    assert [w["outcome"] for w in waits] == ["done"], waits  # released by the nodes
    if launcher_hung:
        pytest.xfail(str(launcher_hung))
    assert proc.returncode == 75, err[-3000:]
