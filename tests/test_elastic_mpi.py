"""Elastic mode under MPI (issue 23): ranks SIGKILLed at a chosen round (tests' hook
$MPI_TELEPORT_TEST_DIE=NODE@ROUND, at the start of round ROUND, before its record; with
``:save`` inside round ROUND's checkpoint), the survivors go on, the job exits 0 and its
records equal the simulator's told of the same failures (``--fail``). Open MPI only: ULFM
(the launcher adds --with-ft ulfm for --elastic); MPICH and plain mpirun refuse --elastic
in one line. Small rank counts, hard timeouts."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import ROOT, run_mpi
from launch_helpers import implementation, kill_tagged, new_tag, this_venv_impl

from mpi_teleport.core import schedule
from mpi_teleport.elastic.survivors import living_phase
from mpi_teleport.sim import main as sim_main
from mpi_teleport.core.spec import RunSpec

BASE = ["--rounds", "24", "--lr", "0.05", "--log-every", "5", "--dim", "8"]


def records(path):
    return [{k: v for k, v in json.loads(line).items() if k != "time_s"}
            for line in open(path) if line.strip()]


def summary(path):
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if k not in ("wall_time_s", "backend")}


# A loss takes effect at the round the test kills the rank in only where every round is
# agreed: the tests that name that round pin it (the default lets the run space them).
EVERY = ["--agree-every", "1"]


def elastic_run(tmp_path, n, args, die, timeout=120, env=None, every=EVERY):
    out = tmp_path / "mpi"
    env = {**os.environ, "MPI_TELEPORT_TEST_DIE": die, **(env or {})}
    res = run_mpi(n, ["-m", "mpi_teleport.run", *BASE, *every, *args, "--elastic", "--out",
                      str(out)], timeout=timeout, env=env)
    return res, out


def simulated(tmp_path, n, args, fails):
    out = tmp_path / "sim"
    argv = ["--nodes", str(n), *BASE, *args, "--out", str(out)]
    for f in fails:
        argv += ["--fail", f]
    code = sim_main(argv)
    return code, out


def assert_equal_runs(tmp_path, n, args, die, fails, env=None):
    res, mpi = elastic_run(tmp_path, n, args, die, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    code, sim = simulated(tmp_path, n, args, fails)
    assert code == 0
    assert records(mpi / "metrics.jsonl") == records(sim / "metrics.jsonl")
    assert summary(mpi / "summary.json") == summary(sim / "summary.json")
    return json.loads((mpi / "summary.json").read_text())


def holder_and_idle(n, k, r, seed=0):
    h = schedule.holders(seed, n, k, r)
    return int(h[0]), next(i for i in range(n) if i not in h)


@pytest.mark.parametrize("who, variant", [("holder", "overlap"), ("idle", "simple"),
                                          ("zero", "overlap")])
def test_one_rank_killed_equals_the_simulator(tmp_path, who, variant):
    """An active holder (Alg. 3), an idle node (Alg. 1), rank 0 (the root: the lowest
    survivor writes the files)."""
    holder, idle = holder_and_idle(4, 2, 7)
    node = {"holder": holder, "idle": idle, "zero": 0}[who]
    args = ["--algorithm", "teleportation", "--k", "2", "--variant", variant, "--momentum", "0.5"]
    s = assert_equal_runs(tmp_path, 4, args, f"{node}@7", [f"{node}@7"])
    assert [x["node"] for x in s["lost"]] == [node]
    if who == "holder" and variant == "overlap":
        assert s["lost"][0]["tokens"] == [0]


def test_two_failures_in_sequence(tmp_path):
    args = ["--algorithm", "teleportation", "--k", "2"]
    s = assert_equal_runs(tmp_path, 5, args, "3@4,1@13", ["3@4", "1@13"])
    assert [(x["node"], x["round"]) for x in s["lost"]] == [(3, 4), (1, 13)]


def test_two_failures_at_the_same_round(tmp_path):
    """Both restored from round 8's start, whichever is seen first (a loss seen during the
    other's recovery starts the recovery again from the same kept state)."""
    args = ["--algorithm", "teleportation", "--k", "2", "--momentum", "0.5"]
    s = assert_equal_runs(tmp_path, 5, args, "0@8,2@8", ["0@8", "2@8"])
    assert [(x["node"], x["round"]) for x in s["lost"]] == [(0, 8), (2, 8)]


@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_agreeing_every_few_rounds_rolls_back_to_the_last_agreement(tmp_path, variant):
    """--agree-every 8 (records every 20): the survivors agree at rounds 0, 8, 16, 20, 24,
    32, 40; a holder killed at round 13 is seen at 16's agreement and the run goes back to
    round 8: it equals the simulator told of the loss at round 8."""
    node = int(schedule.holders(0, 4, 2, 13)[0])
    args = ["--algorithm", "teleportation", "--k", "2", "--variant", variant, "--momentum",
            "0.5", "--agree-every", "8", "--rounds", "40", "--log-every", "20"]
    s = assert_equal_runs(tmp_path, 4, args, f"{node}@13", [f"{node}@8"])
    assert [(x["node"], x["round"]) for x in s["lost"]] == [(node, 8)]


def test_an_interval_chosen_by_the_run_rolls_back_to_an_agreed_boundary(tmp_path):
    """The default (--agree-every 0): the run chooses the interval (its first agreements
    timed, then each completed a boundary later); a holder killed at round 200 is lost at
    an agreed boundary at or before it, between the record at 150 and the kill, and the
    run equals the simulator told of the loss there; config.json records the 0."""
    node = int(schedule.holders(0, 4, 2, 200)[0])
    args = ["--algorithm", "teleportation", "--k", "2", "--momentum", "0.5", "--rounds", "300",
            "--log-every", "150"]
    res, mpi = elastic_run(tmp_path, 4, args, f"{node}@200", every=[])
    assert json.loads((mpi / "config.json").read_text())["agree_every"] == 0
    assert res.returncode == 0, res.stderr[-3000:]
    lost = json.loads((mpi / "summary.json").read_text())["lost"]
    assert [x["node"] for x in lost] == [node] and 150 <= lost[0]["round"] <= 200
    code, sim = simulated(tmp_path, 4, args, [f"{node}@{lost[0]['round']}"])
    assert code == 0
    assert records(mpi / "metrics.jsonl") == records(sim / "metrics.jsonl")


def test_dsgd_re_forms_over_the_survivors(tmp_path):
    s = assert_equal_runs(tmp_path, 4, ["--algorithm", "dsgd"], "2@9", ["2@9"])
    assert s["lost"][0]["restored"] == "dropped"


def test_failure_at_a_logging_round_and_inside_a_checkpoint(tmp_path):
    """Round 10 is logged (the loss is seen in the record's collectives) and round 15's
    checkpoint loses a rank while it is written: both are redone over the survivors."""
    args = ["--algorithm", "teleportation", "--k", "2", "--checkpoint-every", "15"]
    assert_equal_runs(tmp_path, 5, args, "4@10,2@15:save", ["4@10", "2@15"])
    manifest = json.loads((tmp_path / "mpi" / "checkpoints" / "round-00000015" /
                           "MANIFEST.json").read_text())
    assert [(x["node"], x["round"]) for x in manifest["lost"]] == [(4, 10), (2, 15)]


def test_too_few_survivors_exit_75_with_a_checkpoint(tmp_path):
    res, out = elastic_run(tmp_path, 3, ["--algorithm", "teleportation", "--k", "3",
                                         "--checkpoint-every", "5"], "1@6")
    assert res.returncode == 75, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if "mpi_teleport.run" in line]
    assert len(lines) == 1 and "only 2 nodes left at round 6, fewer than k=3" in lines[0]
    manifest = json.loads((out / "checkpoints" / "round-00000006" / "MANIFEST.json").read_text())
    assert manifest["reason"] == "too-few-survivors" and manifest["lost"][0]["node"] == 1
    # the requeue: every node back in, the run finishes; the simulator does the same
    resumed = run_mpi(3, ["-m", "mpi_teleport.run", "--elastic", "--resume", str(out)], timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    sim = tmp_path / "sim"
    assert sim_main(["--nodes", "3", *BASE, "--algorithm", "teleportation", "--k", "3",
                     "--checkpoint-every", "5", "--fail", "1@6", "--out", str(sim)]) == 75
    assert sim_main(["--resume", str(sim)]) == 0  # (the failure plan comes with the checkpoint)
    assert records(out / "metrics.jsonl") == records(sim / "metrics.jsonl")
    assert json.loads((out / "summary.json").read_text())["lost"][0]["node"] == 1


def test_refused_without_ulfm(tmp_path):
    """Plain mpirun (no --with-ft ulfm): one line saying what to use, exit 2."""
    refused_without_ulfm(2, ["--elastic"])


def refused_without_ulfm(n: int, flags: list[str]) -> None:
    """Plain mpirun (no --with-ft ulfm) on n ranks refuses ``flags`` in one line, exit 2."""
    impl = this_venv_impl()
    cmd = [impl.mpirun, "-n", str(n), "--oversubscribe", impl.python, "-m", "mpi_teleport.run",
           "--algorithm", "teleportation", "--k", "1", "--rounds", "3", *flags]
    res = subprocess.run(cmd, cwd=ROOT, env=impl.env(None, None), capture_output=True,
                         text=True, timeout=120)
    lines = [line for line in res.stderr.splitlines() if "error" in line]
    assert res.returncode == 2 and len(lines) == 1 and "--with-ft ulfm" in lines[0]


def refused_under_mpich(n: int, flags: list[str]) -> None:
    """MPICH (no ULFM) on n ranks refuses ``flags`` in one line, exit 2 (skips without it)."""
    impl = implementation("mpich")
    if isinstance(impl, str) or os.environ.get("MPI_TELEPORT_TEST_MPICH") == "off":
        pytest.skip(f"mpich: {impl if isinstance(impl, str) else 'MPI_TELEPORT_TEST_MPICH=off'}")
    res = run_mpi(n, ["-m", "mpi_teleport.run", "--algorithm", "teleportation", "--k", "1",
                      "--rounds", "3", *flags], timeout=120, impl=impl)
    lines = [line for line in res.stderr.splitlines() if "error" in line]
    assert res.returncode == 2 and len(lines) == 1 and "requeue with --resume" in lines[0]


def test_refused_under_mpich():
    refused_under_mpich(2, ["--elastic"])


@pytest.mark.skipif(os.environ.get("MPI_TELEPORT_TEST_SLOW") != "1",
                    reason="slow (~15 s: ULFM's heartbeat detector); MPI_TELEPORT_TEST_SLOW=1 runs it")
def test_hung_rank_is_detected_with_the_detector_on(tmp_path):
    """A SIGSTOPped rank is seen only by ULFM's detector (--mca mpi_ft_detector true): the
    survivors finish the run and write every file; mpirun then still waits for the hung
    process (the job's time limit ends it: docs/tutorials/elastic.md), which the test kills."""
    impl, tag = this_venv_impl(), new_tag()
    out = tmp_path / "mpi"
    args = ["--algorithm", "teleportation", "--k", "2"]
    env = {**os.environ, "MPI_TELEPORT_TEST_DIE": "3@6:stop", "OMPI_MCA_mpi_ft_detector": "true"}
    proc = subprocess.Popen(impl.command(4, ["-m", "mpi_teleport.run", *BASE, *EVERY, *args,
                                             "--elastic", "--out", str(out)]),
                            cwd=ROOT, env=impl.env(env, tag), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "summary.json").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (out / "summary.json").exists(), "the survivors did not finish in 120 s"
    finally:
        kill_tagged(tag)
        proc.kill()
        proc.wait()
    code, sim = simulated(tmp_path, 4, args, ["3@6"])
    assert code == 0 and records(out / "metrics.jsonl") == records(sim / "metrics.jsonl")


def test_living_phase_names_the_same_holders_as_the_test_expects():
    """(The in-process definition the tests above lean on.)"""
    s = RunSpec("teleportation", 4, 2, 24, 0.05)
    assert living_phase(s, (0, 1, 2, 3), 0, False).roster(7)[0].tolist() == \
        schedule.holders(0, 4, 2, 7).tolist()


@pytest.mark.parametrize("algorithm", [["--algorithm", "teleportation", "--k", "2"],
                                       ["--algorithm", "dsgd"]], ids=["teleportation", "dsgd"])
def test_resumed_elastic_run_keeps_the_lost_node_out(tmp_path, algorithm):
    """A checkpoint after a loss, resumed on all the ranks: the lost node stays out (its
    rank idles) and the records equal the uninterrupted elastic run's (DSGD: the
    checkpoint holds only the survivors' replicas)."""
    args = [*algorithm, "--checkpoint-every", "10", "--keep-checkpoints", "5"]
    res, out = elastic_run(tmp_path, 4, args, "2@4")
    assert res.returncode == 0, res.stderr[-3000:]
    whole = records(out / "metrics.jsonl")
    resumed = run_mpi(4, ["-m", "mpi_teleport.run", "--elastic", "--resume",
                          str(out / "checkpoints" / "round-00000010")], timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records(out / "metrics.jsonl") == whole
    assert json.loads((out / "summary.json").read_text())["lost"][0]["node"] == 2


def test_digits_network_with_rank_0_lost_equals_the_simulator(tmp_path):
    """float32 tokens and the evaluation shared by the ranks (every rank a slice of the
    test set), which after rank 0's death is split over the survivors, the lowest of them
    the root."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    args = ["--problem", "digits", "--algorithm", "teleportation", "--k", "2", "--alpha", "0.5",
            "--momentum", "0.9", "--progress", "off", "--batch-size", "8"]
    out = tmp_path / "mpi"
    res = run_mpi(4, ["-m", "mpi_teleport.run", "--rounds", "12", "--log-every", "4",
                      "--lr", "0.05", *EVERY, *args, "--elastic", "--out", str(out)], timeout=120,
                  env={**os.environ, "MPI_TELEPORT_TEST_DIE": "0@6"})
    assert res.returncode == 0, res.stderr[-3000:]
    sim = tmp_path / "sim"
    assert sim_main(["--nodes", "4", "--rounds", "12", "--log-every", "4", "--lr", "0.05", *args,
                     "--fail", "0@6", "--out", str(sim)]) == 0
    assert records(out / "metrics.jsonl") == records(sim / "metrics.jsonl")
    assert [r.get("lost") for r in records(out / "metrics.jsonl")][-1] == [[0, 6]]
