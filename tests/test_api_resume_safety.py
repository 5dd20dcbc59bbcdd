"""Resume and output safety through the API, the same as the command line's (issue 21).

A checkpoint records the settings that determine a run's numbers; a resume with other
ones is refused in one line naming each; a fresh run never writes into a directory that
holds another run's checkpoints; checkpoints written by the API resume through the
command line (or are refused there in one line when it cannot rebuild the problem);
damaged or edited manifests, stray files and a full disk are one line and rewrite
nothing. In-process (the simulator); the MPI side is in tests/test_api_resume_mpi.py and
tests/in_rank/test_api_mpi.py.
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

import mpi_teleport as mt
from mpi_teleport.examples.logistic import LogisticRegression
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main
from helpers import ThreadAllgather

BASE = dict(nodes=4, k=2, lr=0.1, log_every=2)


def problem(**kw):
    return Quadratic(n=kw.pop("n", 4), d=kw.pop("d", 3), sigma2=kw.pop("sigma2", 1.0), **kw)


def errors(records):
    return [(r["round"], r["error"]) for r in records]


@pytest.fixture(scope="module")
def part(tmp_path_factory):
    """A run stopped at round 4 of 8 (checkpoints at 2 and 4)."""
    out = tmp_path_factory.mktemp("api") / "part"
    mt.teleportation(problem(), rounds=4, checkpoint_every=2, out=out, **BASE)
    return out


def _copy(part: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "run"
    shutil.copytree(part, target)
    return target


def _one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("change,named", [
    (dict(seed=1), ["seed=0, not 1"]),
    (dict(lr=0.2), ["lr=0.1, not 0.2"]),
    (dict(lr=0.2, momentum=0.5), ["lr=0.1, not 0.2", "momentum=0.0, not 0.5"]),
    (dict(topology="complete"), ["topology='ring', not 'complete'"]),
    (dict(lr=lambda t: 0.1), ["lr=0.1, not 'function <lambda>"]),
    (dict(problem=dict(sigma2=2.0)), ["sigma2=1.0, not 2.0"]),
    (dict(problem=dict(d=4)), ["dim=3, not 4"]),
    (dict(problem=dict(seed=7)), ["problem_seed"]),
    (dict(k=3), ["the checkpoint has k=2, this run k=3"]),
    (dict(nodes=5, problem=dict(n=5)), ["the checkpoint has n=4 nodes, this run n=5"]),
])
def test_an_api_resume_with_other_settings_is_refused(part, tmp_path, change, named):
    change = dict(change)
    p = problem(**change.pop("problem", {}))
    run = _copy(part, tmp_path)
    before = (run / "metrics.jsonl").read_text(), (run / "config.json").read_text()
    with pytest.raises(mt.UsageError) as caught:
        mt.teleportation(p, **{**BASE, "rounds": 8, **change}, resume=run, out=run)
    text = _one_line(caught)
    assert text.startswith(f"resume='{run}'")
    for words in named:
        assert words in text
    assert ((run / "metrics.jsonl").read_text(), (run / "config.json").read_text()) == before


def test_another_problem_class_is_refused(part, tmp_path):
    run = _copy(part, tmp_path)
    other = LogisticRegression(nodes=4, seed=0)
    with pytest.raises(mt.UsageError) as caught:
        mt.teleportation(other, **{**BASE, "rounds": 8}, resume=run, out=run)
    assert "problem=" in _one_line(caught)


def test_an_api_resume_with_the_same_settings_equals_an_uninterrupted_run(part, tmp_path):
    run = _copy(part, tmp_path)
    full = mt.teleportation(problem(), rounds=8, **BASE)
    resumed = mt.teleportation(problem(), rounds=8, resume=run, out=run, **BASE)
    assert errors(resumed.records) == errors(full.records)
    assert errors(read_jsonl(run / "metrics.jsonl")) == errors(full.records)


def test_a_fresh_api_run_into_another_runs_checkpoints_is_refused(part, tmp_path):
    run = _copy(part, tmp_path)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(mt.UsageError) as caught:
        mt.teleportation(problem(), rounds=8, out=run, **BASE)
    text = _one_line(caught)
    assert "already holds checkpoints of a run (newest: round 4)" in text
    assert f"resume='{run}'" in text
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    with pytest.raises(mt.UsageError, match="already holds checkpoints"):
        mt.dsgd(problem(), nodes=4, rounds=3, lr=0.1, checkpoint_every=1,
                checkpoint_dir=run / "checkpoints")


def test_an_api_checkpoint_resumes_through_the_command_line(part, tmp_path, capsys):
    run = _copy(part, tmp_path)
    full = mt.teleportation(problem(), rounds=8, **BASE)
    assert sim_main(["--resume", str(run), "--rounds", "8"]) == 0
    assert errors(read_jsonl(run / "metrics.jsonl")) == errors(full.records)


@pytest.mark.parametrize("what,make,says", [
    ("user problem", lambda: (LogisticRegression(nodes=4, seed=0), {}),
     "its problem is a Python object (mpi_teleport.examples.logistic.LogisticRegression)"),
    ("lr function", lambda: (problem(), {"lr": lambda t: 0.1}), "its step size is 'function <lambda>"),
    ("topology function", lambda: (problem(), {"topology": lambda k, t: __import__("numpy").full((k, k), 1 / k)}),
     "its topology is a Python function"),
    ("problem seed", lambda: (problem(seed=5), {}), "built with seed 5, the run's seed 0"),
])
def test_the_command_line_refuses_what_it_cannot_rebuild(tmp_path, capsys, what, make, says):
    p, extra = make()
    mt.teleportation(p, rounds=2, checkpoint_every=1, out=tmp_path / "run", **{**BASE, **extra})
    capsys.readouterr()
    assert sim_main(["--resume", str(tmp_path / "run"), "--rounds", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "resume it through the API" in err[0]


def test_a_command_line_checkpoint_resumes_through_the_api(tmp_path, capsys):
    out = tmp_path / "cli"
    assert sim_main(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--dim", "3",
                     "--sigma2", "1", "--zeta2", "0", "--lr", "0.1", "--log-every", "2",
                     "--rounds", "4", "--checkpoint-every", "2", "--out", str(out)]) == 0
    full = mt.teleportation(problem(), rounds=8, target=1e-3, **BASE)
    resumed = mt.teleportation(problem(), rounds=8, target=1e-3, resume=out, out=out, **BASE)
    assert errors(resumed.records) == errors(full.records)
    with pytest.raises(mt.UsageError, match="sigma2=1.0, not 2.0"):
        mt.teleportation(problem(sigma2=2.0), rounds=8, target=1e-3, resume=out, out=out, **BASE)


# ----------------------------------------------------------------------------- damaged inputs
def _manifest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("round-*"))[-1] / "MANIFEST.json"


@pytest.mark.parametrize("edit,says", [
    (lambda m: m["recorder"].update(records="x"), "'recorder.records'"),
    (lambda m: m["recorder"].pop("elapsed"), "lacks 'elapsed'"),
    (lambda m: m.update(wall_s="soon"), "'wall_s'"),
    (lambda m: m.update(k=2.5), "field 'k'"),
    (lambda m: m["config"].update(lr="abc"), None),
])
def test_an_edited_manifest_is_one_line_and_rewrites_nothing(part, tmp_path, capsys, edit, says):
    run = _copy(part, tmp_path)
    path = _manifest(run)
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    before = (run / "metrics.jsonl").read_text(), (run / "config.json").read_text()
    with pytest.raises(mt.UsageError) as caught:
        mt.teleportation(problem(), rounds=8, resume=run, out=run, **BASE)
    text = _one_line(caught)
    assert says is None or says in text
    assert sim_main(["--resume", str(run), "--rounds", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    if says is None:  # the command line reads the edited setting as it would the flag
        assert "--lr (from checkpoint" in err[0] and "expected a number, got 'abc'" in err[0]
    assert ((run / "metrics.jsonl").read_text(), (run / "config.json").read_text()) == before


def test_a_file_named_like_a_checkpoint_is_one_line(tmp_path, capsys):
    ck = tmp_path / "run" / "checkpoints"
    ck.mkdir(parents=True)
    (ck / "round-00000004").write_text("not a checkpoint")
    with pytest.raises(mt.UsageError) as caught:
        mt.teleportation(problem(), rounds=6, checkpoint_every=2, out=tmp_path / "run", **BASE)
    assert "holds round-00000004, which is not a checkpoint directory" in _one_line(caught)
    assert sim_main(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "6",
                     "--checkpoint-every", "2", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a checkpoint directory" in err[0]
    assert (ck / "round-00000004").read_text() == "not a checkpoint"


# ----------------------------------------------------------------------------- a full disk
def _full_disk(monkeypatch, name: str):
    """os.replace of a file called ``name`` fails as on a full disk (the write of every
    output and checkpoint file ends in that rename)."""
    real = os.replace

    def replace(src, dst, *a, **kw):
        if Path(dst).name == name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("name", ["metrics.jsonl", "x.npy", "MANIFEST.json"])
def test_a_full_disk_is_one_line_exit_1_and_the_last_checkpoint_resumes(tmp_path, capsys,
                                                                        monkeypatch, name):
    out = tmp_path / "run"
    args = ["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "6",
            "--checkpoint-every", "2", "--log-every", "2", "--out", str(out)]
    assert sim_main(args[:-4] + ["--rounds", "2", "--checkpoint-every", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    _full_disk(monkeypatch, name)
    assert sim_main(["--resume", str(out), "--rounds", "6"]) == 1
    said, *err = capsys.readouterr().err.strip().splitlines()
    assert said == f"extending {out}: it ended at round 2; running it on to round 6"
    assert len(err) == 1, err
    assert "cannot write" in err[0] and name in err[0] and "No space left on device" in err[0]
    monkeypatch.undo()
    assert sim_main(["--resume", str(out), "--rounds", "6"]) == 0  # nothing lost


def test_a_full_disk_through_the_api_is_one_line_oserror(tmp_path, monkeypatch):
    _full_disk(monkeypatch, "x.npy")
    with pytest.raises(OSError) as caught:
        mt.teleportation(problem(), rounds=4, checkpoint_every=2, out=tmp_path / "run", **BASE)
    assert isinstance(caught.value, mt.OutputError)
    text = str(caught.value)
    assert "\n" not in text and "cannot write" in text and "free some space" in text


# ----------------------------------------------------------------------------- agreement
def test_a_refusal_on_one_process_stops_every_process_with_its_line(tmp_path):
    """What every rank checked on disk (runner.train(refused=)) is agreed in the collective
    that takes the locks: one rank's damaged view stops all, none waits, the lock is freed."""
    import threading

    from mpi_teleport.session import runner

    hub, results = ThreadAllgather(3), {}

    def rank(r):
        refused = "resume='x': checkpoint x is damaged: token-000001.npz is missing" if r == 1 else None
        try:
            runner.hold_agreed([(tmp_path / "out", "out")], hub.rank(r), r == 0, refused)
            results[r] = "ran"
        except mt.UsageError as exc:
            results[r] = str(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(results.values()) == {"resume='x': checkpoint x is damaged: token-000001.npz is missing"}
    assert len(results) == 3
    from mpi_teleport.disk.paths import hold_dirs

    hold_dirs([(tmp_path / "out", "out")])()  # free again: the root released its lock
