"""Failures under plain mpirun (no SLURM): a rank killed, signals, ranks out of step, and
bad input of the MPI runtime (one line from rank 0, exit status 2, before any exchange)."""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from launch_helpers import MPIImpl, is_python, kill_tagged, new_tag, tagged_pids
from launch_helpers import rank_pids as tagged_rank_pids
from mpi_teleport import checkpoint
from mpi_teleport.disk import lock
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from helpers import ROOT

# The MPI tier (start-up agreement and abort, signals with checkpoints): under Open MPI and MPICH.
pytestmark = pytest.mark.mpi_tier

OURS = "mpi_teleport.run: error:"


def start_mpi(n: int, args: list[str], tmp_path, impl: MPIImpl) -> subprocess.Popen:
    """The launcher in the background (its own session), output to files; its processes
    carry a tag in their environment (``proc.tag``) by which the ranks are found."""
    tag = new_tag()
    out, err = open(tmp_path / "stdout", "w"), open(tmp_path / "stderr", "w")
    proc = subprocess.Popen(impl.command(n, args), cwd=ROOT, env=impl.env(tag=tag), stdout=out,
                            stderr=err, start_new_session=True)
    proc.tag = tag
    return proc


def finish(proc: subprocess.Popen, tmp_path, timeout: float):
    """Wait for the launcher; kill every process of the job if it hangs. Returns (status, stderr)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_job(proc)
        proc.wait()
        pytest.fail(f"mpirun still running after {timeout}s:\n{(tmp_path / 'stderr').read_text()[-2000:]}")
    return proc.returncode, (tmp_path / "stderr").read_text()


def kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process carrying its tag (daemons, proxies, ranks)."""
    kill_tagged(proc.tag)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def rank_pids(proc: subprocess.Popen, n: int, timeout: float = 300) -> list[int]:
    """PIDs of the n Python ranks of this job, in rank order (found by its tag, not through
    the launcher's process tree: prterun's and Hydra's differ)."""
    try:
        return tagged_rank_pids(proc.tag, n, timeout)
    except TimeoutError as exc:
        pytest.fail(str(exc))


def job_pythons(proc: subprocess.Popen) -> list[int]:
    return [p for p in tagged_pids(proc.tag) if is_python(p)]


def wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path} did not appear within {timeout}s")
        time.sleep(0.2)


LONG = ["-m", "mpi_teleport.run", "--algorithm", "teleportation", "--k", "2", "--rounds", "100000000",
        "--log-every", "20", "--momentum", "0.5", "--seed", "5", "--progress", "off"]


def test_sigkill_of_one_rank_ends_the_job_within_30_s(tmp_path, mpi_impl):
    proc = start_mpi(4, [*LONG, "--out", str(tmp_path / "run")], tmp_path, mpi_impl)
    try:
        wait_for(tmp_path / "run" / "metrics.jsonl")  # running (flushed after 2 s)
        victim = rank_pids(proc, 4)[2]
        start = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        status, err = finish(proc, tmp_path, timeout=60)
        elapsed = time.monotonic() - start
    finally:
        kill_job(proc)
    assert status != 0
    assert elapsed < 30, f"the job took {elapsed:.1f}s to end after a rank was killed"
    time.sleep(0.5)
    assert not job_pythons(proc), "ranks left behind"


# The logging rounds far apart (none in this run): the ranks' watch finds the signal
# between them (runtime/stop_watch.py); factories:announcing says when the rounds run.
WATCHED = ["-m", "mpi_teleport.run", "--problem", "factories:announcing", "--algorithm",
           "teleportation", "--k", "2", "--rounds", "100000000", "--log-every", "100000000",
           "--momentum", "0.5", "--seed", "5", "--progress", "off"]
SCRIPTS = ROOT / "tests" / "scripts"


@pytest.mark.parametrize("to", ["every rank", "one rank"])
def test_signal_writes_a_complete_checkpoint_and_resume_equals_uninterrupted(tmp_path, mpi_impl, mpirun,
                                                                            monkeypatch, to):
    """SIGTERM (what the scheduler sends) to every rank, or to one: however far the next
    logging round, the ranks agree on one round within about a second, write a final
    checkpoint, and the job ends with status 75 and rank 0's line alone (no banner of
    the MPI's); resumed, it ends as the simulator's uninterrupted run."""
    monkeypatch.setenv("PYTHONPATH", str(SCRIPTS))
    monkeypatch.setenv("ROUNDS_STARTED", str(tmp_path / "started"))
    out = tmp_path / "run"
    proc = start_mpi(4, [*WATCHED, "--out", str(out), "--checkpoint-every", "100000000"], tmp_path,
                     mpi_impl)
    try:
        wait_for(tmp_path / "started", timeout=120)
        pids = rank_pids(proc, 4)
        for pid in pids if to == "every rank" else pids[2:3]:
            os.kill(pid, signal.SIGTERM)
        status, err = finish(proc, tmp_path, timeout=60)
    finally:
        kill_job(proc)
    assert status == 75, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "mpi_teleport.run: stopped by SIGTERM at round" in lines[0], err[-3000:]
    path, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal" and sorted(p.name for p in path.iterdir()) == [
        ".run_id", "MANIFEST.json", "token-000000.npz", "token-000001.npz"]
    r = manifest["round"]
    # resume for 100 more rounds: equal to an uninterrupted run (the simulator's)
    rest = mpirun(4, ["-m", "mpi_teleport.run", "--resume", str(out), "--rounds", str(r + 100)], timeout=180)
    assert rest.returncode == 0, rest.stderr
    common = [a for a in WATCHED[1:] if a != "mpi_teleport.run"]
    common[common.index("--rounds") + 1] = str(r + 100)
    monkeypatch.syspath_prepend(str(SCRIPTS))
    assert sim_main(["--nodes", "4", *common, "--out", str(tmp_path / "sim")]) == 0
    got = [(x["round"], x["error"], x["consensus"]) for x in read_jsonl(out / "metrics.jsonl")]
    ref = [(x["round"], x["error"], x["consensus"]) for x in read_jsonl(tmp_path / "sim" / "metrics.jsonl")]
    assert got == ref and got[-1][0] == r + 100


def test_a_refusal_every_rank_makes_is_one_line_under_plain_mpirun(mpirun):
    """No MPI_Abort and no banner of the MPI's after a refusal every rank knows: the ranks
    finalise and leave in order (runtime/leaving.py), so plain mpirun prints the line alone."""
    proc = mpirun(4, ["-m", "mpi_teleport.run", "--k", "0"], timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "mpirun -n N python -m mpi_teleport.run: error: --k must be at least 1 (one active "
        "node), got 0"], proc.stderr[-3000:]


def test_one_rank_is_refused(mpirun, tmp_path):
    proc = mpirun(1, ["-m", "mpi_teleport.run", "--rounds", "10"], timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "only one MPI rank" in lines[0] and "mpirun -n N" in lines[0] \
        and "mpi_teleport.sim" in lines[0], proc.stderr
    ok = mpirun(1, ["-m", "mpi_teleport.run", "--nodes", "1", "--rounds", "10", "--algorithm", "dsgd"],
                timeout=60)
    assert ok.returncode == 0, ok.stderr  # on purpose: --nodes 1


# ------------------------------------------------------------------ bad input, table-driven
def _fixtures(base: Path) -> dict:
    """Files and directories the bad-input cases point at."""
    paths = {"base": base}
    (base / "a_file").write_text("x")
    (base / "empty").mkdir()
    paths["file"], paths["empty"] = base / "a_file", base / "empty"
    # a 3-node teleportation run with checkpoints at 10 and 20 (simulator: same format)
    run = base / "run3"
    assert sim_main(["--nodes", "3", "--k", "2", "--algorithm", "teleportation", "--rounds", "20",
                     "--log-every", "5", "--checkpoint-every", "10", "--out", str(run)]) == 0
    paths["run3"] = run
    dsgd = base / "dsgd3"
    assert sim_main(["--nodes", "3", "--algorithm", "dsgd", "--rounds", "10", "--checkpoint-every", "5",
                     "--out", str(dsgd)]) == 0
    paths["dsgd3"] = dsgd
    run5 = base / "run5"
    assert sim_main(["--nodes", "5", "--k", "2", "--algorithm", "teleportation", "--rounds", "10",
                     "--checkpoint-every", "5", "--out", str(run5)]) == 0
    paths["run5"] = run5
    damaged = base / "damaged"
    assert sim_main(["--nodes", "3", "--k", "2", "--algorithm", "teleportation", "--rounds", "10",
                     "--checkpoint-every", "5", "--keep-checkpoints", "1", "--out", str(damaged)]) == 0
    (damaged / "checkpoints" / "round-00000010" / "x.npy").unlink()
    paths["damaged"] = damaged
    partial = base / "partial" / "checkpoints" / "round-00000010"
    partial.mkdir(parents=True)
    (partial / "MANIFEST.json").write_text("{not json")
    paths["partial"] = base / "partial"
    (base / "empty.csv").write_text("")
    (base / "two.csv").write_text("0,1\n1,0\n")
    paths["empty_csv"], paths["two_csv"] = base / "empty.csv", base / "two.csv"
    # run3 in the MPI layout (one file per token) with token 1 of the wrong shape; and run3
    # with a manifest that names another round than its directory (tests/test_bad_inputs.py
    # damages the simulator layout in every other way)
    tk = _newest(shutil.copytree(run, base / "tk_shape"))
    manifest = json.loads((tk / "MANIFEST.json").read_text())
    x = np.load(tk / "x.npy")
    for m in range(len(x)):
        np.savez(tk / f"token-{m:06d}.npz", x=x[m] if m != 1 else np.zeros(3))
    (tk / "x.npy").unlink()
    manifest.update(layout="tokens", arrays=["x"])
    (tk / "MANIFEST.json").write_text(json.dumps(manifest))
    paths["tk_shape"] = base / "tk_shape"
    other = _newest(shutil.copytree(run, base / "round_other"))
    manifest = json.loads((other / "MANIFEST.json").read_text())
    (other / "MANIFEST.json").write_text(json.dumps({**manifest, "round": 4}))
    paths["round_other"] = base / "round_other"
    paths["held"] = base / "held"  # locked by this test process while the job runs
    return paths


def _newest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("round-*"))[-1]


UNTOUCHED = ["tk_shape", "round_other", "held"]  # directories the cases must leave as they are


def _snapshot(paths: dict) -> dict:
    return {str(p): p.read_bytes() if p.is_file() else "dir"
            for name in UNTOUCHED for p in sorted(paths[name].rglob("*"))}


def _cuda_visible() -> bool:
    try:
        import torch
    except ImportError:
        return True  # (no torch: leave the case out)
    return torch.cuda.is_available()


BAD_MPI = [  # (flags with {placeholders}, fragment of the one line); 3 ranks
    (["--nodes", "5"], "does not match the 3 MPI ranks"),
    (["--nodes", "0"], "--nodes must be at least 1"),
    (["--k", "4"], "exceeds the number of nodes 3"),
    (["--topology", "star"], "unknown value 'star'"),
    (["--lr", "0"], "--lr must be > 0"),
    (["--latency", "const:-5"], "latency"),
    (["--config", "{base}/missing.toml"], "not found"),
    (["--rounds", "ten"], "expected an integer"),
    (["--checkpoint-every", "abc"], "expected an integer"),
    (["--checkpoint-every", "-1"], "--checkpoint-every must be >= 0"),
    (["--checkpoint-every", "5"], "--checkpoint-every needs a place to write"),
    (["--checkpoint-every", "5", "--out", "{base}/o", "--k", "auto"], "not supported with --k auto"),
    (["--keep-checkpoints", "0"], "--keep-checkpoints must be at least 1"),
    (["--checkpoint-every", "5", "--checkpoint-dir", "{file}"], "--checkpoint-dir"),
    (["--out", "{file}"], "exists and is not a directory"),
    (["--out", "{file}/sub"], "cannot create it"),
    (["--resume", "{base}/nowhere"], "no such directory"),
    (["--resume", "{file}"], "not a directory"),
    (["--resume", "{empty}"], "no complete checkpoint there"),
    (["--resume", "{partial}"], "MANIFEST.json is not readable JSON"),
    (["--resume", "{run5}"], "the checkpoint has n=5 nodes but there are 3 MPI ranks; resume with mpirun -n 5"),
    (["--resume", "{run3}", "--lr", "0.5"], "written with --lr 0.001, not 0.5"),
    (["--resume", "{run3}", "--rounds", "15"], "at round 20, beyond --rounds 15"),
    (["--resume", "{run3}", "--k", "auto"], "--resume is not supported with --k auto"),
    (["--resume", "{dsgd3}", "--algorithm", "teleportation", "--k", "2"],
     "no complete checkpoint of a teleportation run there (it holds a dsgd run)"),
    (["--resume", "{damaged}", "--rounds", "30"], "is damaged: 1 file(s) missing, e.g. x.npy"),
    (["--algorithm", "teleportation", "--k", "2", "--rounds", "30", "--out", "{run3}"],
     "already holds checkpoints of a run (newest: round 20); continue it with --resume"),
    (["--problem", "cifar10", "--data-dir", "{base}/no-data"], "does not exist"),
    (["--problem", "nosuch_module_xyz:problem"], "cannot import 'nosuch_module_xyz'"),
    # a module that exits or is interrupted at import (tests/scripts; issue 31, class 3)
    (["--problem", "import_exits:problem"], "importing 'import_exits' called sys.exit(3)"),
    (["--problem", "import_interrupted:problem"], "importing it raised KeyboardInterrupt"),
    # Algorithm 2 on a problem that cannot validate: at the start (issue 31, class 9)
    (["--problem", "factories:torch_without_validation", "--k", "auto", "--rounds", "4"],
     "chooses k by a validation metric, but the TorchProblem has no validation set"),
    (["--problem", "factories:torch_per_sample_loss"], "loss(output, target) returned a tensor "
                                                       "of shape (2,)"),  # (class 4)
    # faults of the environment (formerly tests/test_bad_inputs.py's MPI rows, 2 ranks each)
    (["--dim", "10000000000"], "GiB"),
    (["--latency", "const:5000000000"], "more than a run can wait for"),
    (["--latency", "matrix:{empty_csv}"], "holds no numbers"),
    (["--latency", "mod:-1"], "must be >= 0"),  # (formerly tests/test_latency_mpi.py)
    (["--latency", "warp:3"], "unknown model 'warp'"),
    (["--latency", "matrix:{two_csv}"], "is 2 x 2 but there are 3 nodes"),
    (["--out", "/proc/x"], "takes no new directories"),
    (["--out", "{held}"], "is in use by pid"),
    (["--resume", "{tk_shape}", "--rounds", "30"], "expected (50,)"),
    (["--resume", "{round_other}", "--rounds", "30"], "says round 4 but the directory is named for round 20"),
    *([(["--problem", "digits", "--device", "cuda"], "--device cuda: no CUDA device is visible")]
      if not _cuda_visible() else []),
]


OUT_OF_STEP = [  # (how rank 2 differs from the others, fragment of the one line); 3 ranks
    ("config", "rank 2 holds another configuration than rank 0 (lr = 0.002 on rank 2, 0.001 on rank 0)"),
    ("schedule", "rank 2 computes another schedule than rank 0"),
    ("badflag", "--k must be at least 1 (one active node), got 0 (on rank 2 only)"),
]


def test_bad_input_under_mpi_one_line_from_rank_0_exit_2(tmp_path, mpi_impl):
    """Every case in one MPI job (3 ranks) by tests/scripts/bad_inputs.py, the ranks out of
    step with each other too (rank 2 with another configuration, schedule or flag): each
    call of run.main must return 2 on every rank with one line on rank 0's stderr, nothing
    on the others' and nothing on stdout, no exchange started (it would hang)."""
    paths = _fixtures(tmp_path)
    cases = [[a.format(**paths) for a in flags] for flags, _ in BAD_MPI]
    cases += [{"argv": ["--rounds", "50"], "perturb": mode} for mode, _ in OUT_OF_STEP]
    table = [*BAD_MPI, *OUT_OF_STEP]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    cmd = mpi_impl.command(3, ["tests/scripts/bad_inputs.py", str(tmp_path / "cases.json"),
                               str(tmp_path / "results")])
    held = lock.acquire(paths["held"], "--out")  # "another job"
    (paths["held"] / "config.json").write_text("{}\n")
    before = _snapshot(paths)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=mpi_impl.env(), capture_output=True, text=True,
                              timeout=300)
        assert _snapshot(paths) == before, "a refused case changed files it must not touch"
    finally:
        held.release()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = [json.loads((tmp_path / "results" / f"rank{r}.json").read_text()) for r in range(3)]
    assert len(BAD_MPI) >= 20
    problems = []
    for i, (flags, fragment) in enumerate(table):
        status = [res[i]["status"] for res in results]
        lines0 = results[0][i]["stderr"].strip().splitlines()
        others = [res[i]["stderr"] for res in results[1:]]
        printed = [res[i]["stdout"] for res in results]
        if status != [2, 2, 2] or len(lines0) != 1 or fragment not in lines0[0] \
                or not lines0[0].startswith("mpirun -n N python -m mpi_teleport.run: error:") \
                or any(others) or any(printed) or "Traceback" in results[0][i]["stderr"]:
            problems.append(f"{flags}: status {status}, rank 0 said {lines0!r}, others {others!r}, "
                            f"printed {printed!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rank1_has,fragment", [
    ("nothing", "--data-dir 'data' does not exist"),  # found while checking the flags
    ("an empty folder", "Fashion-MNIST not found"),  # found while loading
])
def test_data_set_missing_on_one_rank_only_stops_every_rank_with_one_line(tmp_path, mpi_impl,
                                                                          rank1_has, fragment):
    """A relative --data-dir that holds the files on rank 0's node but not on rank 1's
    (node-local disks, one MPMD job with a working directory per rank): every rank stops
    at once with exit status 2 and one line from rank 0 naming the rank; no hang."""
    pytest.importorskip("torchvision")
    from test_datasets_models import _write_fmnist

    here, there = tmp_path / "node0", tmp_path / "node1"
    _write_fmnist(str(here / "data"))
    (there / "data" if rank1_has == "an empty folder" else there).mkdir(parents=True)
    flags = ["-m", "mpi_teleport.run", "--problem", "fashion-mnist", "--data-dir", "data",
             "--nodes", "2", "--rounds", "2"]
    tag = new_tag()
    cmd = mpi_impl.mpmd_command([(here, ["python", *flags]), (there, ["python", *flags])])
    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(cmd, env=mpi_impl.env(tag=tag), stdout=out, stderr=err,
                                start_new_session=True)
    proc.tag = tag
    status, stderr = finish(proc, tmp_path, timeout=240)  # a hang fails, ranks killed
    assert status == 2, stderr[-3000:]
    ours = [line for line in stderr.splitlines() if OURS in line]
    assert len(ours) == 1, stderr[-3000:]
    assert fragment in ours[0] and ours[0].endswith("(on rank 1 only)"), ours[0]
    assert "Traceback" not in stderr


BAD_KEYWORD_SCRIPT = """
import numpy as np
import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=5, lr=0.1, comm="auto",
                 log_every=0)
print("not reached", flush=True)
"""


def test_a_launched_scripts_refused_keyword_is_one_line(mpirun, tmp_path):
    """A training function's keyword refused by its checks (on every rank alike, before
    anything runs) is learnt by every rank in one collective, so the script runner ends
    the job with the one line and status 2, without a traceback per rank or MPI's abort."""
    script = tmp_path / "bad.py"
    script.write_text(BAD_KEYWORD_SCRIPT)
    proc = mpirun(4, ["-m", "mpi_teleport.script_runner", str(script)], timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "log_every must be at least 1, got 0" in lines[0], \
        proc.stderr[-3000:]
    assert "not reached" not in proc.stdout
