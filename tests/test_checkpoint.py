"""Checkpoint and resume (``--checkpoint-every``, ``--checkpoint-dir``, ``--resume``).

A run interrupted at a checkpoint and resumed must write the same metrics.jsonl (round,
error, consensus: bit for bit) as an uninterrupted run, in the simulator, over MPI, and
across the two (a checkpoint is readable by either back end, and by either variant)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mpi_teleport import checkpoint
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from helpers import ROOT


def numbers(path):
    return [(r["round"], r["error"], r["consensus"]) for r in read_jsonl(path)]


def rounds_of(base):
    return [r for r, _, _ in checkpoint.complete(base)]


@pytest.mark.parametrize("algorithm,extra", [
    ("teleportation", ["--momentum", "0.9", "--topology", "base2"]),
    ("teleportation", ["--variant", "simple", "--topology", "exp"]),
    ("dsgd", ["--momentum", "0.5"]),
])
def test_sim_resume_equals_uninterrupted(tmp_path, algorithm, extra):
    common = ["--nodes", "9", "--k", "3", "--algorithm", algorithm, "--log-every", "5",
              "--seed", "7", *extra]
    assert sim_main([*common, "--rounds", "60", "--out", str(tmp_path / "full")]) == 0
    # "interrupted" after 35 rounds: periodic checkpoints at 10, 20, 30 and the final one at 35
    assert sim_main([*common, "--rounds", "35", "--checkpoint-every", "10",
                     "--out", str(tmp_path / "part")]) == 0
    assert rounds_of(tmp_path / "part" / "checkpoints") == [30, 35]  # keep-last-2 pruning
    assert sim_main(["--resume", str(tmp_path / "part"), "--rounds", "60"]) == 0  # rest inherited
    assert numbers(tmp_path / "part" / "metrics.jsonl") == numbers(tmp_path / "full" / "metrics.jsonl")
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    resumed = json.loads((tmp_path / "part" / "summary.json").read_text())
    for key in ("rounds_run", "rounds_to_target", "final_error", "final_consensus", "k"):
        assert resumed[key] == full[key]
    assert rounds_of(tmp_path / "part" / "checkpoints") == [50, 60]
    manifest = checkpoint.read_manifest(tmp_path / "part" / "checkpoints" / "round-00000060")
    assert manifest["final"] and manifest["summary"]["final_error"] == full["final_error"]


def test_checkpoint_files_are_complete_and_atomic(tmp_path):
    assert sim_main(["--nodes", "6", "--k", "2", "--algorithm", "teleportation", "--rounds", "40",
                     "--checkpoint-every", "10", "--keep-checkpoints", "3",
                     "--checkpoint-dir", str(tmp_path / "ck"), "--momentum", "0.5"]) == 0
    assert rounds_of(tmp_path / "ck") == [20, 30, 40]
    for path in (tmp_path / "ck").iterdir():
        names = sorted(p.name for p in path.iterdir())
        assert names == [".run_id", "MANIFEST.json", "v.npy", "x.npy"]  # no temporary file left behind
        m = checkpoint.read_manifest(path)
        assert m["layout"] == "matrix" and m["arrays"] == ["v", "x"] and m["k"] == 2
        assert [r["round"] for r in m["recorder"]["records"]][-1] == m["round"]
    # an interrupted write (no manifest) is ignored by resume and removed by the next pruning
    broken = tmp_path / "ck" / "round-00000050"
    broken.mkdir()
    (broken / "x.npy").write_bytes(b"half")
    found = checkpoint.locate(tmp_path / "ck")
    assert found[0].name == "round-00000040"
    assert sim_main(["--resume", str(tmp_path / "ck"), "--rounds", "60"]) == 0
    assert rounds_of(tmp_path / "ck") == [40, 50, 60] and checkpoint.read_manifest(broken) is not None
    # the checkpoint CLI that job scripts use
    out = subprocess.run([sys.executable, "-m", "mpi_teleport.checkpoint", "newest", str(tmp_path / "ck")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip().endswith("round-00000060")
    (tmp_path / "fresh").mkdir()
    none = subprocess.run([sys.executable, "-m", "mpi_teleport.checkpoint", "newest", str(tmp_path / "fresh")],
                          capture_output=True, text=True, cwd=ROOT)
    assert none.returncode == 1


def test_a_checkpoint_of_the_earlier_schedule_is_refused_in_one_line(tmp_path):
    # format 1 = schedule v1 (a Philox generator per round): its rounds would continue under
    # another schedule, so neither resume nor the checkpoint CLI accepts it
    assert checkpoint.FORMAT == 2
    assert sim_main(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "4",
                     "--checkpoint-every", "2", "--checkpoint-dir", str(tmp_path / "ck")]) == 0
    path = tmp_path / "ck" / "round-00000004"
    data = json.loads((path / "MANIFEST.json").read_text())
    assert data["format"] == 2
    (path / "MANIFEST.json").write_text(json.dumps({**data, "format": 1}))
    with pytest.raises(checkpoint.EarlierScheduleError, match="cannot resume it: start afresh"):
        checkpoint.read_manifest(path)
    out = subprocess.run([sys.executable, "-m", "mpi_teleport.checkpoint", "show", str(path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "written by an earlier mpi_teleport" in out.stderr and "whose schedule" in out.stderr


def test_sim_sigterm_writes_a_checkpoint_and_exits_75(tmp_path):
    out = tmp_path / "run"
    common = ["--nodes", "8", "--k", "4", "--algorithm", "teleportation", "--log-every", "100",
              "--momentum", "0.5", "--seed", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "mpi_teleport.sim", *common, "--rounds", "4000000",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "metrics.jsonl").exists():  # running (metrics are flushed every 2 s)
            assert time.monotonic() < deadline and proc.poll() is None, "the run did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 75, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "stopped by SIGTERM at round" in lines[0] and "--resume" in lines[0]
    path, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal"
    r = manifest["round"]
    assert numbers(out / "metrics.jsonl")[-1][0] <= r  # metrics.jsonl matches the checkpoint
    # resume for 300 more rounds and compare with an uninterrupted run of that length
    assert sim_main(["--resume", str(out), "--rounds", str(r + 300)]) == 0
    assert sim_main([*common, "--rounds", str(r + 300), "--out", str(tmp_path / "full")]) == 0
    assert numbers(out / "metrics.jsonl") == numbers(tmp_path / "full" / "metrics.jsonl")


def test_mpi_checkpoint_resumes_in_the_other_variant_and_equals_the_simulator(tmp_path, mpirun):
    """compare over MPI, interrupted at round 30 (Alg. 3), resumed as Alg. 1 to round 50."""
    common = ["--k", "3", "--topology", "base2", "--momentum", "0.5", "--log-every", "5", "--seed", "4"]
    part = mpirun(5, ["-m", "mpi_teleport.run", *common, "--rounds", "30", "--checkpoint-every", "10",
                      "--out", str(tmp_path / "mpi")])
    assert part.returncode == 0, part.stderr
    ck = tmp_path / "mpi" / "teleportation" / "checkpoints" / "round-00000030"
    assert sorted(p.name for p in ck.iterdir()) == [
        ".run_id", "MANIFEST.json", "token-000000.npz", "token-000001.npz", "token-000002.npz"]
    rest = mpirun(5, ["-m", "mpi_teleport.run", "--resume", str(tmp_path / "mpi"), "--rounds", "50",
                      "--variant", "simple"])
    assert rest.returncode == 0, rest.stderr
    assert sim_main(["--nodes", "5", *common, "--rounds", "50", "--out", str(tmp_path / "sim")]) == 0
    for algorithm in ("teleportation", "dsgd"):
        assert numbers(tmp_path / "mpi" / algorithm / "metrics.jsonl") == numbers(
            tmp_path / "sim" / algorithm / "metrics.jsonl"), algorithm
    assert json.loads((tmp_path / "mpi" / "comparison.json").read_text())["dsgd"]["rounds_run"] == 50


def test_checkpoints_cross_back_ends_and_keep_the_virtual_clock(tmp_path, mpirun):
    """A simulator checkpoint resumes under MPI; an MPI checkpoint keeps every rank's logical
    clock of the latency layer, so virtual_time_s continues exactly (modelled compute time)."""
    common = ["--algorithm", "teleportation", "--k", "4", "--topology", "ring", "--momentum", "0.9",
              "--log-every", "4", "--latency", "mod:3", "--clock", "virtual", "--compute-time", "20"]
    # the uninterrupted run: the simulator's (MPI's virtual clock equals it bit for bit:
    # tests/test_latency_mpi.py)
    assert sim_main(["--nodes", "6", *common, "--rounds", "40", "--out", str(tmp_path / "full")]) == 0
    reference = read_jsonl(tmp_path / "full" / "metrics.jsonl")
    # simulator -> MPI
    assert sim_main(["--nodes", "6", *common, "--rounds", "24", "--checkpoint-every", "8",
                     "--out", str(tmp_path / "sim")]) == 0
    rest = mpirun(6, ["-m", "mpi_teleport.run", "--resume", str(tmp_path / "sim"), "--rounds", "40"])
    assert rest.returncode == 0, rest.stderr
    assert numbers(tmp_path / "sim" / "metrics.jsonl") == numbers(tmp_path / "full" / "metrics.jsonl")
    # MPI -> MPI, clocks included
    part = mpirun(6, ["-m", "mpi_teleport.run", *common, "--rounds", "24", "--checkpoint-every", "8",
                      "--out", str(tmp_path / "mpi")])
    assert part.returncode == 0, part.stderr
    assert len(checkpoint.locate(tmp_path / "mpi")[1]["clocks_us"]) == 6
    rest = mpirun(6, ["-m", "mpi_teleport.run", "--resume", str(tmp_path / "mpi"), "--rounds", "40"])
    assert rest.returncode == 0, rest.stderr
    resumed = read_jsonl(tmp_path / "mpi" / "metrics.jsonl")
    assert [(r["round"], r["error"], r["virtual_time_s"]) for r in resumed] == [
        (r["round"], r["error"], r["virtual_time_s"]) for r in reference]


def test_token_arrays_include_extra_buffers(tmp_path):
    """Per-token arrays beyond x and v (``state.buffers``) are saved and restored too."""
    class State:
        def __init__(self):
            self.x, self.v = np.arange(4.0), np.ones(4)
            self.buffers = {"running_mean": np.full(3, 2.5, dtype=np.float32)}

    src, dst = State(), State()
    dst.x[:], dst.v[:], dst.buffers["running_mean"][:] = 0, 0, 0
    checkpoint.save_token(tmp_path, 3, checkpoint.token_arrays(src))
    checkpoint.restore_token(dst, checkpoint.load_token(tmp_path, {"layout": "tokens"}, 3))
    assert (dst.x == src.x).all() and (dst.v == src.v).all()
    assert (dst.buffers["running_mean"] == 2.5).all() and dst.buffers["running_mean"].dtype == np.float32
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]
