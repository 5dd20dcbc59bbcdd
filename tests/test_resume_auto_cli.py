"""Issue 47: ``--resume auto`` on the command line, as the API's ``resume="auto"``: the run
in ``--out`` (or ``--checkpoint-dir``) is continued when unfinished, reported as it ended
when finished, and a fresh run starts where there is none, so a job array reruns one
command line (session/preflight.auto_resume). Through ``python -m mpi_teleport.sim``'s main,
in process."""
import json
import shutil

from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from helpers import without_time

RUN = ["--algorithm", "teleportation", "--nodes", "4", "--k", "2", "--dim", "4",
       "--lr", "0.05", "--log-every", "5", "--checkpoint-every", "10", "--progress", "off",
       "--rounds", "20"]


def summary(path):
    return {k: v for k, v in json.loads((path / "summary.json").read_text()).items()
            if k != "wall_time_s"}


def test_resume_auto_starts_continues_and_reports_a_finished_run(tmp_path):
    full = tmp_path / "full"
    assert sim_main([*RUN, "--out", str(full)]) == 0
    run = tmp_path / "run"
    # none there: a fresh run
    assert sim_main([*RUN, "--out", str(run), "--resume", "auto"]) == 0
    assert without_time(read_jsonl(run / "metrics.jsonl")) == without_time(read_jsonl(full / "metrics.jsonl"))
    # unfinished (as if killed after round 10's checkpoint): continued to the same end
    shutil.rmtree(run / "checkpoints" / "round-00000020")
    (run / "summary.json").unlink()
    assert sim_main([*RUN, "--out", str(run), "--resume", "auto"]) == 0
    assert without_time(read_jsonl(run / "metrics.jsonl")) == without_time(read_jsonl(full / "metrics.jsonl"))
    assert summary(run) == summary(full)
    assert (run / "checkpoints" / "round-00000020" / "x.npy").read_bytes() == \
        (full / "checkpoints" / "round-00000020" / "x.npy").read_bytes()
    # finished: reported as it ended, nothing trained again
    before = (run / "metrics.jsonl").read_bytes()
    assert sim_main([*RUN, "--out", str(run), "--resume", "auto"]) == 0
    assert (run / "metrics.jsonl").read_bytes() == before and summary(run) == summary(full)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["round-00000010",
                                                                       "round-00000020"]


def test_resume_auto_finds_a_compare_runs_legs_and_its_checkpoint_dir(tmp_path):
    flags = [a for a in RUN if a not in ("--algorithm", "teleportation")]
    c = str(tmp_path / "c")
    assert sim_main([*flags, "--rounds", "10", "--out", c, "--resume", "auto"]) == 0
    assert sim_main([*flags, "--rounds", "10", "--out", c, "--resume", "auto"]) == 0  # finished
    # another length continues only when asked: --resume DIR (auto: the same run only)
    assert sim_main([*flags, "--out", c, "--resume", "auto"]) == 2
    assert sim_main([*flags, "--out", c, "--resume", c]) == 0
    for leg in ("teleportation", "dsgd"):  # both continued from round 10 to 20
        rounds = [r["round"] for r in read_jsonl(tmp_path / "c" / leg / "metrics.jsonl")]
        assert rounds == [0, 5, 10, 15, 20], leg
    apart = ["--checkpoint-dir", str(tmp_path / "ck")]
    assert sim_main([*RUN, "--rounds", "10", *apart, "--resume", "auto"]) == 0
    assert sim_main([*RUN, *apart, "--resume", "auto"]) == 2
    assert sim_main([*RUN, *apart, "--resume", str(tmp_path / "ck")]) == 0
    assert (tmp_path / "ck" / "round-00000020").is_dir()


def test_resume_auto_without_a_directory_is_one_line(capsys):
    assert sim_main([*RUN, "--resume", "auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--resume auto needs --out or --checkpoint-dir" in err[0]
