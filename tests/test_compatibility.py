"""Records, checkpoints and resuming across versions: files written by commit 5a8ff97
(before issue 27's redesign: tests/data/written_by_5a8ff97, made with the flags below)
are what this version writes, bit for bit, and a checkpoint written then resumes now to
the records of the uninterrupted run. Serial, no MPI."""
from __future__ import annotations

import json
import shutil

from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from helpers import ROOT, without_time

BASE = ROOT / "tests" / "data" / "written_by_5a8ff97"
FLAGS = ["--nodes", "8", "--k", "2", "--dim", "6", "--momentum", "0.5", "--lr", "0.05",
         "--log-every", "5", "--algorithm", "teleportation", "--progress", "off"]
CHECKPOINT = "checkpoints/round-00000020"


def config(path):
    """config.json without where it was written."""
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in ("out",)}


def test_records_and_checkpoints_are_those_the_base_wrote(tmp_path):
    assert sim_main([*FLAGS, "--rounds", "40", "--out", str(tmp_path / "full")]) == 0
    assert (without_time(read_jsonl(tmp_path / "full" / "metrics.jsonl"))
            == without_time(read_jsonl(BASE / "full" / "metrics.jsonl")))
    assert config(tmp_path / "full" / "config.json") == config(BASE / "full" / "config.json")
    assert sim_main([*FLAGS, "--rounds", "20", "--checkpoint-every", "10",
                     "--keep-checkpoints", "1", "--out", str(tmp_path / "part")]) == 0
    for name in ("x.npy", "v.npy"):  # the tokens' models and momenta, byte for byte
        got = (tmp_path / "part" / CHECKPOINT / name).read_bytes()
        assert got == (BASE / "part" / CHECKPOINT / name).read_bytes(), name
    mine = json.loads((tmp_path / "part" / CHECKPOINT / "MANIFEST.json").read_text())
    theirs = json.loads((BASE / "part" / CHECKPOINT / "MANIFEST.json").read_text())
    assert sorted(mine) == sorted(theirs)
    places = ("out", "checkpoint_dir", "resume")  # (where each run lay on disk)
    for key in sorted(set(theirs) - {"run_id", "written", "wall_s", "recorder", "summary"}):
        if key == "config":
            assert ({k: v for k, v in mine[key].items() if k not in places}
                    == {k: v for k, v in theirs[key].items() if k not in places})
        else:
            assert mine[key] == theirs[key], key
    assert (without_time(mine["recorder"]["records"])
            == without_time(theirs["recorder"]["records"]))


def test_a_checkpoint_the_base_wrote_resumes_to_the_uninterrupted_records(tmp_path):
    run = tmp_path / "part"
    shutil.copytree(BASE / "part", run)
    assert sim_main(["--resume", str(run), "--rounds", "40", "--out", str(run),
                     "--progress", "off"]) == 0
    assert (without_time(read_jsonl(run / "metrics.jsonl"))
            == without_time(read_jsonl(BASE / "full" / "metrics.jsonl")))
