"""A resume says what it does, one line on the root's stderr, from the command line and the
API alike: it continues a run, extends a finished one given more rounds, or returns a
finished one (whose callback still sees its last record); ``resume="auto"`` continues only
a run of the same length, another length only when asked with ``resume=DIR``."""
from __future__ import annotations

import shutil

import pytest

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main

CLI = ["--algorithm", "teleportation", "--nodes", "4", "--k", "2", "--dim", "3",
       "--log-every", "2", "--checkpoint-every", "3", "--progress", "off"]
API = dict(nodes=4, k=2, lr=0.05, log_every=2, checkpoint_every=3)


def lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_the_command_line_says_resuming_extending_and_returning(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert sim_main([*CLI, "--rounds", "6", "--out", run]) == 0
    assert lines(capsys) == []  # a fresh run: nothing to say
    assert sim_main([*CLI, "--rounds", "6", "--out", run, "--resume", "auto"]) == 0
    assert lines(capsys) == [f"{run} finished at round 6: returning it"]
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "round-00000006")  # (as if killed)
    assert sim_main([*CLI, "--rounds", "6", "--out", run, "--resume", "auto"]) == 0
    assert lines(capsys) == [f"resuming {run} from round 3 of 6"]
    assert sim_main(["--resume", run, "--rounds", "9", "--progress", "off"]) == 0
    assert lines(capsys) == [f"extending {run}: it ended at round 6; running it on to round 9"]


def test_the_api_says_them_too_and_a_returned_runs_callback_sees_its_last_record(tmp_path,
                                                                                 capsys):
    seen = []
    where = dict(out=tmp_path / "run", callback=lambda record: seen.append(record["round"]))
    done = mt.teleportation(Quadratic(n=4, d=3), rounds=6, resume="auto", **where, **API)
    assert seen == [0, 2, 4, 6] and lines(capsys) == []
    seen.clear()
    again = mt.teleportation(Quadratic(n=4, d=3), rounds=6, resume="auto", **where, **API)
    assert lines(capsys) == [f"{tmp_path / 'run'} finished at round 6: returning it"]
    assert seen == [6] and again.records == done.records
    seen.clear()
    mt.teleportation(Quadratic(n=4, d=3), rounds=8, resume=tmp_path / "run", **where, **API)
    assert lines(capsys) == [f"extending {tmp_path / 'run'}: it ended at round 6; running it "
                             f"on to round 8"]
    assert seen == [8]


def test_resume_auto_continues_only_a_run_of_the_same_length(tmp_path, capsys):
    """A one-round trial (a script's --dry-run) left its state in the directory: the real
    run with resume="auto" is refused in one line naming both lengths; resume=DIR asks."""
    trial = mt.teleportation(Quadratic(n=4, d=3), rounds=1, out=tmp_path / "run",
                             resume="auto", **API)
    assert trial.summary["rounds_run"] == 1
    with pytest.raises(mt.UsageError) as got:
        mt.teleportation(Quadratic(n=4, d=3), rounds=6, out=tmp_path / "run", resume="auto",
                         **API)
    message = str(got.value)
    assert "\n" not in message and "holds a run of 1 rounds (at round 1)" in message
    assert "this one is of 6 rounds" in message and f"resume='{tmp_path / 'run'}'" in message
    capsys.readouterr()
    run = str(tmp_path / "cli")
    assert sim_main([*CLI, "--rounds", "1", "--out", run, "--resume", "auto"]) == 0
    assert sim_main([*CLI, "--rounds", "6", "--out", run, "--resume", "auto"]) == 2
    (line,) = lines(capsys)
    assert "--resume auto" in line and "1 rounds" in line and f"--resume {run}" in line
    # a fresh run there, without --resume, is refused as before (it says to resume it)
    assert sim_main([*CLI, "--rounds", "6", "--out", run]) == 2
    assert "already holds checkpoints" in lines(capsys)[0]
    # asked: it continues the trial to the new length
    assert sim_main([*CLI, "--rounds", "6", "--out", run, "--resume", run]) == 0
    assert lines(capsys) == [f"extending {run}: it ended at round 1; running it on to round 6"]


def test_a_run_stopped_at_its_target_is_returned_and_one_that_missed_it_extended(tmp_path,
                                                                                  capsys):
    flags = [*CLI, "--stop-at-target", "--lr", "0.05", "--log-every", "1", "--rounds", "40"]
    hit, missed = str(tmp_path / "hit"), str(tmp_path / "missed")
    assert sim_main([*flags, "--target", "0.5", "--out", hit]) == 0
    assert sim_main([*flags, "--target", "0.5", "--out", hit, "--resume", hit]) == 0
    assert sim_main([*flags[:-1], "6", "--target", "1e-30", "--out", missed]) == 0
    assert sim_main([*flags[:-1], "9", "--target", "1e-30", "--out", missed,
                     "--resume", missed]) == 0
    assert lines(capsys) == [f"{hit} stopped at its target at round 6: returning it",
                             f"extending {missed}: it ended at round 6; running it on to round 9"]
