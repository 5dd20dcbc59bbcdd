"""No data loss and no hang: the run-directory lock (two jobs, one directory, simulator,
MPI and API), resume from another working directory, pruning beside directories this run
did not write, a signal during a long set-up and during a long real-clock latency delay.
Each waits under a timeout."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mpi_teleport import checkpoint
from mpi_teleport.disk import lock
from mpi_teleport.errors import UsageError
from mpi_teleport.disk.output import read_jsonl

from conftest import run_mpi
from launch_helpers import this_venv_impl
from test_failures import finish, kill_job, rank_pids, start_mpi, wait_for
from helpers import ROOT

LONG = ["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "100000000",
        "--log-every", "50", "--progress", "off"]


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def _sim(args, cwd, timeout=120):
    return subprocess.run([sys.executable, "-m", "mpi_teleport.sim", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def _start_sim(args, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mpi_teleport.sim", *args], cwd=cwd,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen, timeout=60) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the job did not stop within {timeout}s after SIGTERM")
    return proc.returncode, err


# ----------------------------------------------------------------------------- the lock
@pytest.mark.parametrize("flag", ["--out", "--checkpoint-dir"])
def test_second_simulator_job_on_the_same_directory_is_refused(tmp_path, flag):
    extra = ["--checkpoint-every", "50000000"] if flag == "--checkpoint-dir" else []
    first = _start_sim([*LONG, flag, "shared", *extra], tmp_path)
    try:
        wait_for(tmp_path / "shared" / lock.RUN_LOCK, timeout=60)
        second = _sim([*LONG, "--rounds", "5", flag, "shared", *extra], tmp_path, timeout=60)
        assert first.poll() is None, "the first job must go on"
    finally:
        status, err = _stop(first)
    assert second.returncode == 2 and "Traceback" not in second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and f"is in use by pid {first.pid} on host" in lines[0], lines
    assert status == 75, err  # the first job checkpointed on SIGTERM as usual
    assert not (tmp_path / "shared" / lock.RUN_LOCK).exists()  # released at its end
    # and the directory is free again
    again = _sim([*LONG, "--rounds", "2", flag, "shared2", *extra], tmp_path)
    assert again.returncode == 0, again.stderr


@pytest.mark.mpirun
def test_second_mpi_job_on_the_same_out_is_refused_on_every_rank(tmp_path):
    out = tmp_path / "shared"
    args = ["-m", "mpi_teleport.run", "--k", "1", "--algorithm", "teleportation", "--rounds",
            "100000000", "--log-every", "50", "--progress", "off", "--out", str(out)]
    impl = this_venv_impl()
    first = start_mpi(2, args, tmp_path, impl)
    try:
        wait_for(out / lock.RUN_LOCK, timeout=120)
        holder = lock.holder(str(out / lock.RUN_LOCK))
        second = run_mpi(2, [*args[:-2], "--rounds", "4", "--out", str(out)], timeout=120,
                         impl=impl)
        # the simulator is refused by the MPI job's lock as well
        sim = _sim(["--nodes", "2", "--k", "1", "--rounds", "2", "--algorithm", "teleportation",
                    "--out", str(out)], tmp_path)
        assert first.poll() is None
    finally:
        for pid in rank_pids(first, 2):
            os.kill(pid, signal.SIGTERM)
        status, err = finish(first, tmp_path, timeout=120)
        kill_job(first)
    assert second.returncode == 2, second.stderr[-2000:]
    ours = [line for line in second.stderr.splitlines() if "mpi_teleport.run: error:" in line]
    assert len(ours) == 1 and f"is in use by pid {holder['pid']}" in ours[0], second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert sim.returncode == 2 and f"pid {holder['pid']}" in sim.stderr
    assert status == 75, err[-2000:]


def test_api_refuses_a_held_directory(tmp_path):
    import mpi_teleport as mt
    from mpi_teleport.problems.quadratic import Quadratic

    with lock.acquire(tmp_path / "held", "out"):
        with pytest.raises(UsageError, match=rf"is already held by this process \(pid {os.getpid()}\)"):
            mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=3, lr=0.05,
                             out=tmp_path / "held")
    assert not (tmp_path / "held" / "config.json").exists()
    result = mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=3, lr=0.05,
                              out=tmp_path / "held")
    assert result.k == 2 and not (tmp_path / "held" / lock.RUN_LOCK).exists()


@pytest.mark.parametrize("same", ["the same path", "a link to it"])
def test_one_directory_serves_as_out_and_checkpoint_dir_through_the_api(tmp_path, same):
    """Issue 31, class 6: before, the run refused it, naming its own pid as the holder."""
    import mpi_teleport as mt
    from mpi_teleport.problems.quadratic import Quadratic

    both = tmp_path / "both"
    both.mkdir()
    ck = both if same == "the same path" else tmp_path / "link"
    if ck != both:
        ck.symlink_to(both)
    args = dict(nodes=4, k=2, lr=0.05, checkpoint_every=5)
    mt.teleportation(Quadratic(n=4, d=3), rounds=10, out=both, checkpoint_dir=ck, **args)
    assert checkpoint.newest(both)[1]["round"] == 10
    result = mt.teleportation(Quadratic(n=4, d=3), rounds=15, out=both, checkpoint_dir=ck,
                              resume=both, **args)
    assert result.summary["rounds_run"] == 15 and checkpoint.newest(both)[1]["round"] == 15
    assert read_jsonl(both / "metrics.jsonl")[-1]["round"] == 15
    assert not (both / lock.RUN_LOCK).exists()


def test_a_second_run_in_the_same_process_is_not_called_another_job(tmp_path):
    """A run started from inside another (here: its callback) on the directory the first
    holds: one line that says so, not 'in use by pid <this process>'."""
    import mpi_teleport as mt
    from mpi_teleport.problems.quadratic import Quadratic

    refused = []

    def nested(record):
        try:
            mt.dsgd(Quadratic(n=4, d=3), nodes=4, rounds=2, lr=0.05, out=tmp_path / "run")
        except UsageError as exc:
            refused.append(str(exc))
        return True

    mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=3, lr=0.05, log_every=1,
                     out=tmp_path / "run", callback=nested)
    assert len(refused) == 1 and "\n" not in refused[0]
    assert f"is already held by this process (pid {os.getpid()}) for another run" in refused[0]


# ----------------------------------------------------------------------------- resume
def test_resume_from_another_working_directory_writes_next_to_its_run(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    (b / "runs" / "x").mkdir(parents=True)
    (b / "runs" / "x" / "config.json").write_text("an unrelated run's file\n")
    first = _sim(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "20",
                  "--checkpoint-every", "5", "--out", "runs/x"], a)
    assert first.returncode == 0, first.stderr
    saved = json.loads((a / "runs" / "x" / "config.json").read_text())
    assert saved["out"] == str(a / "runs" / "x")  # stored resolved
    manifest = checkpoint.newest(a / "runs" / "x" / "checkpoints")[1]
    assert manifest["config"]["out"] == str(a / "runs" / "x")
    rest = _sim(["--resume", "../A/runs/x", "--rounds", "30"], b)
    assert rest.returncode == 0, rest.stderr
    assert (b / "runs" / "x" / "config.json").read_text() == "an unrelated run's file\n"
    assert sorted(os.listdir(b / "runs" / "x")) == ["config.json"]
    assert read_jsonl(a / "runs" / "x" / "metrics.jsonl")[-1]["round"] == 30
    assert checkpoint.newest(a / "runs" / "x" / "checkpoints")[1]["round"] == 30


# Issue 31, class 7: a resume of a run that kept its checkpoints apart (--checkpoint-dir ck
# --out out), resumed with --resume ck --out out, wrote its new checkpoints into
# out/checkpoints: ck still ended at round 10 while the run reached 15, silently.
KEPT_APART = ["--nodes", "4", "--k", "2", "--rounds", "10", "--checkpoint-every", "5",
              "--checkpoint-dir", "ck", "--out", "out", "--progress", "off"]


@pytest.mark.parametrize("algorithm", ["teleportation", "compare"])
def test_a_resume_keeps_checkpointing_where_its_checkpoints_were_kept(tmp_path, algorithm):
    assert _sim([*KEPT_APART, "--algorithm", algorithm], tmp_path).returncode == 0
    for rounds in (15, 20):  # resumed twice: the second finds what the first wrote
        rest = _sim(["--resume", "ck", "--out", "out", "--rounds", str(rounds)], tmp_path)
        assert rest.returncode == 0, rest.stderr
    legs = ["teleportation", "dsgd"] if algorithm == "compare" else [""]
    for leg in legs:
        assert checkpoint.newest(tmp_path / "ck" / leg)[1]["round"] == 20
        assert read_jsonl(tmp_path / "out" / leg / "metrics.jsonl")[-1]["round"] == 20
        assert not (tmp_path / "out" / leg / "checkpoints").exists()


def test_a_resume_given_its_own_checkpoint_dir_writes_there(tmp_path):
    assert _sim([*KEPT_APART, "--algorithm", "teleportation"], tmp_path).returncode == 0
    rest = _sim(["--resume", "ck", "--out", "out", "--checkpoint-dir", "ck2", "--rounds", "15"],
                tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert checkpoint.newest(tmp_path / "ck2")[1]["round"] == 15
    assert checkpoint.newest(tmp_path / "ck")[1]["round"] == 10


def test_an_api_resume_keeps_checkpointing_where_its_checkpoints_were_kept(tmp_path):
    import mpi_teleport as mt
    from mpi_teleport.problems.quadratic import Quadratic

    args = dict(nodes=4, k=2, lr=0.05, checkpoint_every=5)
    mt.teleportation(Quadratic(n=4, d=3), rounds=10, out=tmp_path / "out",
                     checkpoint_dir=tmp_path / "ck", **args)
    for rounds in (15, 20):
        mt.teleportation(Quadratic(n=4, d=3), rounds=rounds, out=tmp_path / "out",
                         resume=tmp_path / "ck", **args)
    assert checkpoint.newest(tmp_path / "ck")[1]["round"] == 20
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_an_mpi_resume_keeps_checkpointing_where_its_checkpoints_were_kept(tmp_path, mpirun):
    flags = ["-m", "mpi_teleport.run", "--algorithm", "teleportation", *KEPT_APART[2:]]
    flags = [str(tmp_path / a) if a in ("ck", "out") else a for a in flags]
    assert mpirun(4, flags, timeout=120).returncode == 0
    rest = mpirun(4, ["-m", "mpi_teleport.run", "--resume", str(tmp_path / "ck"), "--out",
                      str(tmp_path / "out"), "--rounds", "15"], timeout=120)
    assert rest.returncode == 0, rest.stderr[-2000:]
    assert checkpoint.newest(tmp_path / "ck")[1]["round"] == 15
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_a_manifest_naming_another_directory_cannot_redirect_writes(tmp_path):
    run = tmp_path / "run"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.json").write_text("keep me\n")
    assert _sim(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "10",
                 "--checkpoint-every", "5", "--out", str(run)], tmp_path).returncode == 0
    for path in (run / "checkpoints").glob("round-*"):  # a manifest edited to point elsewhere
        data = json.loads((path / "MANIFEST.json").read_text())
        data["config"].update(out=str(victim), checkpoint_dir=str(victim / "ck"))
        (path / "MANIFEST.json").write_text(json.dumps(data))
    rest = _sim(["--resume", str(run), "--rounds", "15"], tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert sorted(os.listdir(victim)) == ["config.json"]
    assert (victim / "config.json").read_text() == "keep me\n"
    assert read_jsonl(run / "metrics.jsonl")[-1]["round"] == 15


def test_pruning_leaves_directories_it_did_not_write(tmp_path):
    ck = tmp_path / "ck"
    own = ck / "round-00000001"  # a user's own directory that looks like a checkpoint
    own.mkdir(parents=True)
    (own / "notes.txt").write_text("mine\n")
    other = ck / "round-00000003"  # an interrupted write of another lineage
    other.mkdir()
    (other / checkpoint.RUN_MARKER).write_text("someone-else\n")
    (other / "x.npy").write_bytes(b"half")
    assert _sim(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "10",
                 "--checkpoint-every", "2", "--keep-checkpoints", "1", "--checkpoint-dir",
                 str(ck)], tmp_path).returncode == 0
    assert (own / "notes.txt").read_text() == "mine\n"
    assert (other / "x.npy").read_bytes() == b"half"
    ours = [p.name for p in sorted(ck.iterdir()) if p not in (own, other)]
    assert ours == ["round-00000010"]
    # a resumed run continues the lineage: it prunes its ancestors' checkpoints too
    run_id = checkpoint.read_manifest(ck / "round-00000010")["run_id"]
    assert _sim(["--resume", str(ck), "--rounds", "14"], tmp_path).returncode == 0
    assert sorted(p.name for p in ck.iterdir()) == ["round-00000001", "round-00000003",
                                                    "round-00000014"]
    assert checkpoint.read_manifest(ck / "round-00000014")["run_id"] == run_id


# ----------------------------------------------------------------------------- no hang
def test_sigterm_during_a_long_set_up_stops_at_once(tmp_path):
    # x* of the quadratic problem sums over n = 5 million nodes at d = 53, near the limit of
    # n*d draws: ~6 s on an idle 2-core machine, longer under load
    proc = _start_sim(["--nodes", "5000000", "--dim", "53", "--k", "2", "--algorithm",
                       "teleportation", "--rounds", "2"], tmp_path)
    time.sleep(2.5)  # started (interpreter ~0.5 s), inside the sum
    assert proc.poll() is None
    start = time.monotonic()
    status, err = _stop(proc, timeout=30)
    assert time.monotonic() - start < 20
    assert status == 128 + signal.SIGTERM and "Traceback" not in err
    assert err.strip().splitlines() == [line for line in err.strip().splitlines()
                                        if "stopped by SIGTERM" in line] and err.strip()


@pytest.mark.mpirun
def test_sigterm_during_a_long_latency_delay_checkpoints(tmp_path):
    """Ten minutes per message on the real clock: SIGTERM must not wait for it."""
    out = tmp_path / "run"
    proc = start_mpi(2, ["-m", "mpi_teleport.run", "--k", "2", "--algorithm", "teleportation",
                         "--rounds", "50", "--log-every", "1", "--progress", "off",
                         "--latency", "const:600000000", "--out", str(out)], tmp_path,
                     this_venv_impl())
    try:
        wait_for(out / "config.json", timeout=120)
        pids = rank_pids(proc, 2)
        time.sleep(3)  # inside round 1's delay
        start = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        status, err = finish(proc, tmp_path, timeout=120)
        elapsed = time.monotonic() - start
    finally:
        kill_job(proc)
    assert status == 75, err[-2000:]
    assert elapsed < 60
    path, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal" and manifest["round"] >= 1


def test_resuming_one_leg_of_compare_writes_into_that_leg(tmp_path):
    assert _sim(["--nodes", "4", "--k", "2", "--rounds", "10", "--checkpoint-every", "5",
                 "--out", "cmp"], tmp_path).returncode == 0
    before = sorted(os.listdir(tmp_path / "cmp"))
    leg = tmp_path / "cmp" / "teleportation"
    rest = _sim(["--resume", str(leg / "checkpoints" / "round-00000010"), "--rounds", "12",
                 "--algorithm", "teleportation"], tmp_path / "cmp")
    assert rest.returncode == 0, rest.stderr
    assert sorted(os.listdir(tmp_path / "cmp")) == before  # nothing beside the legs
    assert read_jsonl(leg / "metrics.jsonl")[-1]["round"] == 12
    assert checkpoint.newest(leg / "checkpoints")[1]["round"] == 12
