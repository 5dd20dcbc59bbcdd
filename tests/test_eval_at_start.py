"""Issue 47: the round-0 evaluation can be skipped (eval_at_start=False, the command
line's --no-eval-at-start); the last round is always evaluated, so the final metric is
never an unevaluated model's; a bad value is one line."""
import json

import pytest

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main
from helpers import without_time


def test_round_zero_is_not_evaluated_and_the_rest_is_unchanged():
    run = dict(nodes=4, k=2, rounds=20, lr=0.05, log_every=10)
    skipped = mt.teleportation(Quadratic(n=4, d=3, seed=0), eval_at_start=False, **run)
    plain = mt.teleportation(Quadratic(n=4, d=3, seed=0), **run)
    assert without_time(skipped.records)[0] == {"round": 0}
    assert without_time(skipped.records)[1:] == without_time(plain.records)[1:]
    assert skipped.summary["final_error"] == plain.summary["final_error"]
    one = mt.dsgd(Quadratic(n=4, d=3, seed=0), nodes=4, rounds=1, lr=0.05, eval_at_start=False)
    assert "error" in one.records[-1] and one.summary["final_error"] == one.records[-1]["error"]
    with pytest.raises(mt.UsageError) as info:
        mt.dsgd(Quadratic(n=4, d=3, seed=0), nodes=4, rounds=2, lr=0.05, eval_at_start="no")
    assert "eval_at_start" in str(info.value) and "\n" not in str(info.value)


def test_the_command_line_skips_it_too(tmp_path):
    flags = ["--nodes", "4", "--k", "2", "--rounds", "20", "--log-every", "10", "--progress",
             "off", "--algorithm", "teleportation"]
    assert sim_main([*flags, "--no-eval-at-start", "--out", str(tmp_path / "a")]) == 0
    first = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[0])
    assert set(first) == {"round", "time_s"}
    assert json.loads((tmp_path / "a" / "config.json").read_text())["eval_at_start"] is False
