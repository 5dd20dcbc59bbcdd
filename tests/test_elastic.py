"""Elastic mode, in-process (issue 23): the schedule over the living set, the failure plan
of the simulator and its records, the restore rule, and the refusals. The MPI runs that
kill ranks are tests/test_elastic_mpi.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.elastic import survivors as elastic
from mpi_teleport.core import schedule
from mpi_teleport.elastic.survivors import Living, living_phase, parse_failures
from mpi_teleport.errors import UsageError
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.core.spec import RunSpec
from mpi_teleport.sim import main as sim_main


def spec(algorithm="teleportation", n=7, k=3, variant="overlap", momentum=0.0):
    return RunSpec(algorithm, n, k if algorithm == "teleportation" else n, 40, 0.05, momentum,
                   "ring", variant, 5)


# -- the schedule over the living set -------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["teleportation", "dsgd"])
def test_living_schedule_with_everyone_is_the_schedule(algorithm):
    s = spec(algorithm)
    base, living = s.phases()[0], living_phase(s, tuple(range(7)), 0, False)
    assert np.array_equal(base.rosters(0, 50), living.rosters(0, 50))
    assert all(np.array_equal(base.roster(t)[0], living.roster(t)[0]) for t in range(50))


def test_living_schedule_is_pure_and_never_schedules_the_dead():
    s = spec(n=9, k=4)
    alive = (0, 2, 3, 5, 8)
    a, b = living_phase(s, alive, 10, True), living_phase(s, alive, 10, True)
    rows = a.rosters(10, 400)
    assert np.array_equal(rows, b.rosters(10, 400))
    assert set(np.unique(rows)) <= set(alive)
    assert all(len(set(r.tolist())) == 4 for r in rows)  # k distinct holders every round
    # the definition: the schedule over |L| indices mapped to L
    assert np.array_equal(rows, np.asarray(alive)[schedule.holders_block(5, 5, 4, 10, 390)])
    # one round alone equals its row of the block
    assert np.array_equal(a.roster(37)[0], rows[27])


def test_dsgd_over_the_living_is_the_survivors():
    phase = living_phase(spec("dsgd", n=6), (0, 1, 4, 5), 3, True)
    assert phase.roster(9)[0].tolist() == [0, 1, 4, 5]
    assert phase.is_placement_round(3) and not phase.is_placement_round(4)


# -- the restore rule ---------------------------------------------------------------------------
def test_restore_is_the_mean_of_the_surviving_tokens_in_token_order():
    x = np.arange(12, dtype=np.float64).reshape(4, 3) ** 1.5
    v = np.ones_like(x)
    entry = np.array([6, 2, 9, 4])
    x2, v2, lost = elastic.restore(spec(n=10, k=4), x, v, entry, [9, 3])
    assert lost == [2]
    want = (np.add.reduce(x[[0, 1, 3]].astype(np.float64), axis=0) / 3).astype(x.dtype)
    assert np.array_equal(x2[2], want) and np.array_equal(x2[[0, 1, 3]], x[[0, 1, 3]])
    assert not v2[2].any() and v2[[0, 1, 3]].all()
    xd, _, dropped = elastic.restore(spec("dsgd", n=4), x, None, np.arange(4), [1])
    assert dropped == [1] and np.array_equal(xd, x[[0, 2, 3]])


def test_failure_plan_parsing():
    assert parse_failures(["3@20", "1@5,2@5"]) == (
        elastic.Failure(1, 5), elastic.Failure(2, 5), elastic.Failure(3, 20))
    for bad in ("3", "a@2", "3@-1"):
        with pytest.raises(UsageError, match="NODE@ROUND"):
            parse_failures([bad])
    with pytest.raises(UsageError, match="does not exist"):
        parse_failures(["9@1"], nodes=5)
    with pytest.raises(UsageError, match="only once"):
        parse_failures(["1@1", "1@4"])


def test_resume_keeps_the_lost_out_unless_too_few():
    lost = [{"node": 2, "round": 4, "tokens": [1], "restored": "x"}]
    assert Living.from_manifest(5, {"lost": lost}).nodes == (0, 1, 3, 4)
    back = Living.from_manifest(5, {"lost": lost, "reason": "too-few-survivors"})
    assert back.nodes == tuple(range(5)) and back.losses == lost


# -- the simulator with a failure plan -------------------------------------------------------------
def problem():
    return Quadratic(n=6, d=5, sigma2=1.0, zeta2=1.0, seed=2)


def test_no_failure_is_the_plain_run():
    plain = mt.teleportation(problem(), nodes=6, k=3, rounds=20, lr=0.05, log_every=5)
    el = mt.teleportation(problem(), nodes=6, k=3, rounds=20, lr=0.05, log_every=5, elastic=True)
    drop = lambda rs: [{k: v for k, v in r.items() if k != "time_s"} for r in rs]  # noqa: E731
    assert drop(plain.records) == drop(el.records) and np.array_equal(plain.x, el.x)
    assert el.summary["lost"] == []


def test_failure_plan_records_the_loss_and_restores_the_holders_token():
    h = schedule.holders(0, 6, 3, 7)  # where the tokens sit at round 7's start (Alg. 3)
    holder = int(h[1])
    alive = tuple(i for i in range(6) if i != holder)  # round 12's holders are over them
    h12 = living_phase(RunSpec("teleportation", 6, 3, 20, 0.05), alive, 7, True).roster(12)[0]
    idle = next(i for i in alive if i not in h12)
    res = mt.teleportation(problem(), nodes=6, k=3, rounds=20, lr=0.05, log_every=5,
                           momentum=0.5, fail=[f"{holder}@7", f"{idle}@12"])
    assert res.summary["lost"] == [
        {"node": holder, "round": 7, "tokens": [1], "restored": elastic.RESTORE_SOURCE},
        {"node": idle, "round": 12, "tokens": [], "restored": None}]
    lost = [r.get("lost") for r in res.records]
    assert lost == [None, None, [[holder, 7]], [[holder, 7], [idle, 12]], [[holder, 7], [idle, 12]]]
    plain = mt.teleportation(problem(), nodes=6, k=3, rounds=20, lr=0.05, log_every=5, momentum=0.5)
    assert res.records[1]["error"] == plain.records[1]["error"]
    assert res.records[2]["error"] != plain.records[2]["error"]


def test_dsgd_failure_plan_re_forms_over_the_survivors():
    res = mt.dsgd(problem(), nodes=6, rounds=12, lr=0.05, log_every=4, fail=["0@4", "5@4"])
    assert [x["node"] for x in res.summary["lost"]] == [0, 5]
    assert res.summary["lost"][0]["restored"] == "dropped"


def test_too_few_survivors_is_exit_75_with_a_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    code = sim_main(["--nodes", "4", "--k", "3", "--algorithm", "teleportation", "--rounds", "20",
                     "--lr", "0.05", "--fail", "1@6", "--fail", "3@9", "--out", str(out),
                     "--checkpoint-every", "5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 75 and len(err) == 1
    assert "only 2 nodes left at round 9, fewer than k=3" in err[0] and "--resume" in err[0]
    manifest = json.loads((out / "checkpoints" / "round-00000009" / "MANIFEST.json").read_text())
    assert manifest["reason"] == "too-few-survivors"
    assert [x["node"] for x in manifest["lost"]] == [1, 3]


def test_elastic_resume_equals_uninterrupted(tmp_path):
    args = dict(nodes=6, k=3, rounds=20, lr=0.05, log_every=5, fail=["2@3"])
    whole = mt.teleportation(problem(), **args)
    mt.teleportation(problem(), **{**args, "rounds": 20}, out=tmp_path / "a", checkpoint_every=10)
    # a resumed run from round 10 knows node 2 was lost at round 3
    manifest = json.loads((tmp_path / "a" / "checkpoints" / "round-00000010" / "MANIFEST.json").read_text())
    assert [x["node"] for x in manifest["lost"]] == [2]
    resumed = mt.teleportation(problem(), **{k: v for k, v in args.items() if k != "fail"},
                               elastic=True, resume=tmp_path / "a" / "checkpoints" / "round-00000010")
    drop = lambda rs: [{k: v for k, v in r.items() if k != "time_s"} for r in rs]  # noqa: E731
    assert drop(resumed.records) == drop(whole.records)


def test_dsgd_resume_after_a_loss_equals_uninterrupted(tmp_path):
    """DSGD drops a lost node's replica: the checkpoint holds n - 1 rows (``tokens`` in its
    manifest) and resumes to the uninterrupted run's records."""
    args = dict(nodes=5, rounds=20, lr=0.05, log_every=5, fail=["2@5"])
    whole = mt.dsgd(problem(), **args, out=tmp_path / "a", checkpoint_every=10, keep_checkpoints=5)
    ck = tmp_path / "a" / "checkpoints" / "round-00000010"
    assert json.loads((ck / "MANIFEST.json").read_text())["tokens"] == 4
    resumed = mt.dsgd(problem(), **{k: v for k, v in args.items() if k != "fail"}, elastic=True,
                      resume=ck)
    drop = lambda rs: [{k: v for k, v in r.items() if k != "time_s"} for r in rs]  # noqa: E731
    assert drop(resumed.records) == drop(whole.records)


@pytest.mark.parametrize("argv, message", [
    (["--fail", "2@3"], "choose --algorithm teleportation or dsgd"),
    (["--algorithm", "teleportation", "--k", "auto", "--fail", "2@3"], "not --k auto"),
    (["--algorithm", "teleportation", "--fail", "7@3"], "node 7 does not exist"),
    (["--algorithm", "teleportation", "--fail", "x"], "expected NODE@ROUND"),
    (["--algorithm", "teleportation", "--fail", "1@2", "--latency", "const:5"], "latency"),
    (["--algorithm", "teleportation", "--agree-every", "4"], "--agree-every needs --elastic"),
])
def test_refusals_are_one_line(argv, message, capsys):
    assert sim_main(["--nodes", "5", "--rounds", "5", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_every_holder_lost_at_once_is_exit_75_without_a_restore(capsys):
    """Nothing left to restore from (both tokens' holders lost together): exit 75, one line,
    resume from the newest checkpoint."""
    h = schedule.holders(0, 4, 2, 5)
    code = sim_main(["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "10",
                     "--fail", f"{h[0]}@5", "--fail", f"{h[1]}@5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 75 and len(err) == 1 and "every token's holder was lost at round 5" in err[0]


def test_the_chosen_interval_spreads_an_agreement_over_a_hundred_rounds_within_the_redo_bound():
    """--agree-every 0 (mpi_teleport/elastic/backend.py): the smallest power of two whose
    rounds take 100 agreements and copies, but no longer than REDO_S; the ranks' largest
    choice is what the agreement's word carries."""
    from mpi_teleport.elastic import backend

    assert backend.interval(3e-3, 2e-5, 7e-4) == 128  # (512 wanted; 0.1 s is 142 rounds)
    assert backend.interval(3e-3, 2e-4, 5e-3) == 16  # (64 wanted; 0.1 s is 20 rounds)
    assert backend.interval(1e-4, 0.0, 1e-3) == 16  # (10 wanted)
    assert backend.interval(1e-6, 0.0, 1e-3) == 1
    assert backend.interval(1.0, 0.0, 1e-9) == backend.AUTO_MOST
    words = [backend._exponent_bits(a) for a in (16, 128, 1)]
    assert backend._largest(words[0] & words[1] & words[2]) == 128


def test_the_interval_chosen_by_the_run_is_elastic_modes_default(tmp_path):
    """Beside --fail (as with --elastic) config.json records 0, the interval chosen by the
    run; a run without them records 1, as plain runs always have, and takes
    --agree-every 1 as that; a hand-built RunSettings resolves alike."""
    base = ["--nodes", "4", "--rounds", "4", "--algorithm", "teleportation", "--k", "2",
            "--progress", "off"]
    for name, argv, recorded in [("fail", ["--fail", "1@2"], 0), ("plain", [], 1),
                                 ("pinned", ["--agree-every", "1"], 1),
                                 ("fail-pinned", ["--fail", "1@2", "--agree-every", "1"], 1)]:
        assert sim_main([*base, *argv, "--out", str(tmp_path / name)]) == 0
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["agree_every"] == recorded, name
    s = spec()
    assert mt.RunSettings(s, elastic=True).agree_every == 0
    assert mt.RunSettings(s).agree_every == 1
    assert mt.RunSettings(s, elastic=True, agree_every=8).agree_every == 8
