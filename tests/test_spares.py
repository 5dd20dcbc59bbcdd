"""Hot spares, in-process (issue 32): a dead node taken over by the lowest waiting spare
(same id, tokens restored by the elastic rule, every node stays in the schedule), the
first S failures replaced and later ones lost, a spare that dies while it waits, DSGD,
the records and resume. The MPI runs that kill ranks are tests/test_spares_mpi.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.elastic import survivors as elastic
from mpi_teleport.core import schedule
from mpi_teleport.elastic.survivors import RESTORE_SOURCE, assign, parse_failures
from mpi_teleport.errors import UsageError
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main
from mpi_teleport.core.spec import RunSpec


def problem(n=6):
    return Quadratic(n=n, d=5, sigma2=1.0, zeta2=1.0, seed=3)


def drop(records):
    return [{k: v for k, v in r.items() if k not in ("time_s", "replaced")} for r in records]


ARGS = dict(nodes=6, k=3, rounds=20, lr=0.05, log_every=5, momentum=0.5)


# -- the rule ------------------------------------------------------------------------------
def test_the_lowest_dead_node_gets_the_lowest_waiting_spare():
    assert assign([5, 2], [9, 7]) == ({2: 7, 5: 9}, [])
    assert assign([5, 2, 3], [8]) == ({2: 8}, [3, 5])
    assert assign([1], []) == ({}, [1])


def test_restore_refills_a_replaced_dsgd_replica_and_drops_a_lost_one():
    s = RunSpec("dsgd", 4, 4, 10, 0.1)
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    v = np.ones_like(x)
    entry = np.arange(4)
    out, vout, lost = elastic.restore(s, x, v, entry, dead=[1, 3], replaced={1: 4})
    assert lost == [1, 3]
    mean = elastic.mean_of(x[[0, 2]])
    assert np.array_equal(out, np.stack([x[0], mean, x[2]]))  # replica 3 dropped
    assert np.array_equal(vout, np.stack([v[0], np.zeros(3), v[2]]))


# -- the simulator -------------------------------------------------------------------------
def test_an_idle_node_replaced_changes_no_number():
    """A node that holds no token at its death: the spare takes its id, the schedule and
    every token stay, so the numbers are the plain run's (a loss would re-draw the holders)."""
    h = schedule.holders(0, 6, 3, 7)
    idle = next(i for i in range(6) if i not in h)
    plain = mt.teleportation(problem(), **ARGS)
    spared = mt.teleportation(problem(), **ARGS, fail=[f"{idle}@7"], spares=1)
    lost = mt.teleportation(problem(), **ARGS, fail=[f"{idle}@7"])
    assert drop(spared.records) == drop(plain.records) and np.array_equal(spared.x, plain.x)
    assert drop(lost.records) != drop(plain.records)
    assert spared.summary["replaced"] == [{"node": idle, "round": 7, "spare": 6, "tokens": [],
                                           "restored": None}]
    assert spared.summary["lost"] == [] and spared.summary["spares"] == 1
    assert [r.get("replaced") for r in spared.records] == [None, None, [[idle, 7, 6]],
                                                          [[idle, 7, 6]], [[idle, 7, 6]]]


def test_a_replaced_holders_token_is_the_mean_and_the_schedule_stays():
    h = schedule.holders(0, 6, 3, 7)  # Alg. 3: the tokens sit with holders(7) at round 7's start
    res = mt.teleportation(problem(), **ARGS, fail=[f"{h[1]}@7"], spares=2)
    assert res.summary["replaced"] == [{"node": int(h[1]), "round": 7, "spare": 6, "tokens": [1],
                                        "restored": RESTORE_SOURCE}]
    plain = mt.teleportation(problem(), **ARGS)
    assert res.records[1]["error"] == plain.records[1]["error"]
    assert res.records[2]["error"] != plain.records[2]["error"]


def test_first_failures_are_replaced_later_ones_lost():
    res = mt.teleportation(problem(), **ARGS, fail=["1@4", "2@9", "4@9"], spares=2)
    assert [(x["node"], x["spare"]) for x in res.summary["replaced"]] == [(1, 6), (2, 7)]
    assert [x["node"] for x in res.summary["lost"]] == [4]
    assert res.records[-1]["lost"] == [[4, 9]]
    assert res.records[-1]["replaced"] == [[1, 4, 6], [2, 9, 7]]


def test_a_spare_that_dies_while_it_waits_is_gone():
    res = mt.teleportation(problem(), **ARGS, fail=["6@0", "1@4", "3@9"], spares=2)
    assert [(x["node"], x["spare"]) for x in res.summary["replaced"]] == [(1, 7)]
    assert [x["node"] for x in res.summary["lost"]] == [3]


def test_dsgd_keeps_every_replica_when_replaced():
    res = mt.dsgd(problem(), nodes=6, rounds=12, lr=0.05, log_every=4, fail=["0@4", "5@8"],
                  spares=1)
    assert res.summary["replaced"][0] == {"node": 0, "round": 4, "spare": 6, "tokens": [0],
                                          "restored": RESTORE_SOURCE}
    assert res.summary["lost"][0]["node"] == 5 and res.summary["lost"][0]["restored"] == "dropped"


def test_no_spare_used_writes_the_elastic_records():
    plain = mt.teleportation(problem(), **ARGS, fail=["2@5"])
    spared = mt.teleportation(problem(), **ARGS, fail=["2@5"], spares=0)
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in plain.records] == \
        [{k: v for k, v in r.items() if k != "time_s"} for r in spared.records]
    assert "replaced" not in spared.summary and "spares" not in spared.summary


def strip(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]


def test_resume_after_a_replacement_equals_uninterrupted(tmp_path):
    """The checkpoint knows node 2 was taken over (it stays in the run); the resumed job has
    no spare left either, so node 4's death at round 14 is a loss, as uninterrupted."""
    args = dict(ARGS, fail=["2@3", "4@14"], spares=1)
    whole = mt.teleportation(problem(), **args)
    mt.teleportation(problem(), **args, out=tmp_path / "a", checkpoint_every=10)
    ck = tmp_path / "a" / "checkpoints" / "round-00000010"
    manifest = json.loads((ck / "MANIFEST.json").read_text())
    assert [x["node"] for x in manifest["replaced"]] == [2] and manifest["lost"] == []
    resumed = mt.teleportation(problem(), **{**args, "spares": 0}, resume=ck)
    assert strip(resumed.records) == strip(whole.records)
    assert resumed.summary["lost"] == whole.summary["lost"]
    assert resumed.summary["replaced"] == whole.summary["replaced"]


def test_a_resumed_job_may_have_other_spares(tmp_path):
    """Requeued with two fresh spares (ids 6, 7 again): node 4 is taken over by spare 6."""
    args = dict(ARGS, fail=["2@3", "4@14"], spares=1)
    whole = mt.teleportation(problem(), **args)
    mt.teleportation(problem(), **args, out=tmp_path / "a", checkpoint_every=10)
    ck = tmp_path / "a" / "checkpoints" / "round-00000010"
    resumed = mt.teleportation(problem(), **{**args, "spares": 2}, resume=ck)
    assert [(x["node"], x["round"], x["spare"]) for x in resumed.summary["replaced"]] == \
        [(2, 3, 6), (4, 14, 6)]
    assert resumed.summary["lost"] == [] and resumed.summary["spares"] == 2
    assert strip(resumed.records)[:3] == strip(whole.records)[:3]
    assert strip(resumed.records)[3:] != strip(whole.records)[3:]


# -- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--algorithm", "teleportation", "--spares", "1"], "--spares needs --elastic (MPI) or --fail"),
    (["--algorithm", "teleportation", "--spares", "-1", "--fail", "1@2"], "--spares"),
    (["--algorithm", "teleportation", "--spares", "1", "--fail", "6@2"],
     "node 6 does not exist (n=5, spare 5)"),
])
def test_refusals_are_one_line(argv, message, capsys):
    assert sim_main(["--nodes", "5", "--rounds", "5", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_spare_ids_are_accepted_in_the_plan_only_with_spares():
    assert parse_failures(["7@2"], 6, 2) == (elastic.Failure(7, 2),)
    with pytest.raises(UsageError, match="spares 6..7"):
        parse_failures(["8@2"], 6, 2)


def test_api_refuses_spares_without_a_failure_plan_or_elastic():
    with pytest.raises(UsageError, match="spares= needs elastic=True"):
        mt.teleportation(problem(), **ARGS, spares=1)
