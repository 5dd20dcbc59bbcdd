"""The one preparation step both front ends take (mpi_teleport/session/prepare.py): the same
disk checks with the same words (spelt by the front end), each run's checkpoint plan
made once and frozen, the directories a job locks. Serial, no MPI, about a second."""
import dataclasses
import pytest

from mpi_teleport.errors import API, CLI, UsageError
from mpi_teleport.session.disk_check import Leg, Places, check_disk
from mpi_teleport.session.prepare import check_job
from mpi_teleport.session.settings import resolve


def _refusal(naming, legs, places):
    with pytest.raises(UsageError) as caught:
        check_disk(legs, places, nodes=4, rounds=10, record={}, naming=naming)
    return str(caught.value)


def test_a_refusal_has_the_same_words_on_both_front_ends(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    legs, places = [Leg("teleportation", 2, tmp_path / "ck")], Places(resume=empty)
    cli, api = _refusal(CLI, legs, places), _refusal(API, legs, places)
    assert cli == f"--resume {empty}: no complete checkpoint of a teleportation run there"
    assert api == cli.replace(f"--resume {empty}", f"resume={str(empty)!r}")


def test_a_stray_file_in_the_checkpoint_directory_is_refused_alike(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "round-00000004").write_text("x")  # (a file named like one)
    legs, places = [Leg("dsgd", 4, tmp_path / "ck")], Places(out=tmp_path / "out")
    said = _refusal(CLI, legs, places)
    assert "holds round-00000004, which is not a checkpoint directory" in said
    assert said == _refusal(API, legs, places)


def test_the_plan_is_made_once_and_frozen(tmp_path):
    done = check_disk([Leg("teleportation", 2, tmp_path / "ck")],
                   Places(out=tmp_path, every=5, keep=3), nodes=4, rounds=10, record={},
                   naming=API)
    plan = done.plan("teleportation")
    assert (plan.dir, plan.every, plan.keep, plan.source) == (tmp_path / "ck", 5, 3, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.source = tmp_path  # type: ignore[misc]


def test_a_compare_job_locks_its_directories_once(tmp_path):
    cfg = resolve({"nodes": 4, "k": 2, "rounds": 4, "out": str(tmp_path / "o"),
                   "checkpoint_every": 2})
    done = check_job(cfg)
    assert [(str(p), what) for p, what in done.hold] == [
        (str(tmp_path / "o"), "--out"),
        (str(tmp_path / "o" / "teleportation" / "checkpoints"), "checkpoint directory"),
        (str(tmp_path / "o" / "dsgd" / "checkpoints"), "checkpoint directory")]
    assert done.plan("dsgd").dir == tmp_path / "o" / "dsgd" / "checkpoints"
