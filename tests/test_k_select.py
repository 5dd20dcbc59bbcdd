"""Algorithm 2's selection criterion (--k-select): each criterion's values equal a direct
computation (from token matrices, and from the logged records), each chooses its best
candidate, every criterion is reported whichever chose, and MPI equals the simulator."""
import json
import math

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.examples.logistic import LogisticRegression
from mpi_teleport.disk.output import RunFiles, read_jsonl
from mpi_teleport.problem import with_defaults as adapt
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.runtime.search import CRITERIA, SearchRecorder
from mpi_teleport.sim import main as sim_main
from mpi_teleport.core.spec import Logging, RunSpec
from helpers import without_time


# n = 7 (candidates 1, 2, 4 and 7) where the three criteria choose three different k
# (averaged 7, tokens 4, time-average 1: checked below, so the test keeps its teeth; seed 2
# under schedule v2, found by trying seeds from 0).
SETTING = ["--k", "auto", "--algorithm", "teleportation", "--nodes", "7", "--dim", "10",
           "--sigma2", "10", "--zeta2", "10", "--lr", "0.05", "--rounds", "24",
           "--log-every", "5", "--seed", "2", "--progress", "off"]
RUN = ["-m", "mpi_teleport.run"]


def expected_from_records(records: list, rounds: int) -> dict:
    """The 'averaged' and 'time-average' values of every candidate, recomputed from
    metrics.jsonl: the averaged model's validation metric at each logged round after its
    phase's first step (phase 1: ``validation``; phase 2: ``validation_by_k``)."""
    trace: dict[str, list] = {}
    for r in records:
        if r["phase"] == 1 and "validation" in r:
            trace.setdefault(str(r["k"]), []).append((r["round"], r["validation"]))
        for k, v in r.get("validation_by_k", {}).items():
            trace.setdefault(k, []).append((r["round"], v))
    out = {"averaged": {}, "time-average": {}}
    for k, points in trace.items():
        values = [v for _, v in points]
        out["averaged"][k] = values[-1]
        out["time-average"][k] = math.fsum(values) / len(values)
    return out, trace


def argbest(values: dict) -> int:
    return min((v, int(k)) for k, v in values.items())[1]


def run_sim(tmp_path, select: str) -> tuple[dict, list]:
    out = tmp_path / f"sim-{select}"
    assert sim_main([*SETTING, "--k-select", select, "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text()), read_jsonl(out / "metrics.jsonl")


@pytest.mark.parametrize("select", CRITERIA)
def test_each_criterion_chooses_what_the_records_say(tmp_path, select):
    summary, records = run_sim(tmp_path, select)
    by = summary["candidates_by_criterion"]
    assert set(by) == set(CRITERIA) and summary["k_select"] == select
    assert all(set(v) == {"1", "2", "4", "7"} for v in by.values())
    expected, trace = expected_from_records(records, 24)
    # logged rounds after each phase's first step: 5, 10, 15, 20, 24 (and 29..48 in phase 2)
    assert [r for r, _ in trace["7"]] == [5, 10, 15, 20, 24]
    assert [r for r, _ in trace["1"]] == [29, 34, 39, 44, 48]
    assert summary["time_average_rounds"] == 5
    assert by["averaged"] == expected["averaged"]
    assert by["time-average"] == expected["time-average"]
    # tokens: the quadratic's per-token validation is ||x_m - x*||^2, whose mean over the
    # tokens is the final error the records carry (summed in another order: ~1 ulp)
    assert by["tokens"] == pytest.approx(summary["candidate_final_error"], rel=1e-13)
    picks = {c: argbest(by[c]) for c in CRITERIA}
    assert summary["k_by_criterion"] == picks
    assert summary["k"] == picks[select] and summary["candidates"] == by[select]
    assert picks == {"averaged": 7, "tokens": 4, "time-average": 1}


def test_criteria_equal_a_direct_computation_from_token_matrices():
    # Feed the recorder hand-made token matrices: n = 3 (candidates 1, 2 and 3), T = 2.
    problem = adapt(Quadratic(n=3, d=2, zeta2=4.0, seed=1))
    x_star = problem.problem.x_star()  # (the wrapped problem's own method)
    spec = RunSpec("search", 3, None, 2, 0.1, k_select="tokens")
    recorder = SearchRecorder(spec, Logging(log_every=1), problem, RunFiles(None))
    rng = np.random.default_rng(0)
    mats = {k: [rng.normal(size=(k, 2)) for _ in range(3)] for k in (1, 2, 3)}
    for r in range(3):
        recorder.record(0, r, [mats[3][r]], 0.0, {})
    for r in range(2, 5):
        recorder.record(1, r, [mats[1][r - 2], mats[2][r - 2]], 0.0, {})

    def averaged(x):
        return float(np.sum((x.mean(axis=0) - x_star) ** 2))

    for k in (1, 2, 3):
        final = mats[k][-1]
        assert recorder.values["averaged"][k] == pytest.approx(averaged(final), rel=1e-14)
        assert recorder.values["tokens"][k] == pytest.approx(
            np.mean(np.sum((final - x_star) ** 2, axis=1)), rel=1e-14)
        assert recorder.values["time-average"][k] == pytest.approx(
            np.mean([averaged(x) for x in mats[k][1:]]), rel=1e-14)  # rounds after the first
    tokens = recorder.values["tokens"]
    assert recorder.chosen() == min(tokens, key=lambda k: (tokens[k], k))


def test_api_select_and_its_errors():
    problem = Quadratic(n=7, d=10, sigma2=10.0, zeta2=10.0, seed=3)
    common = dict(nodes=7, rounds=24, lr=0.05, log_every=5, seed=3)
    results = {s: mt.search_k(problem, select=s, **common) for s in CRITERIA}
    first = results["averaged"].summary
    for select, result in results.items():
        assert result.k == first["k_by_criterion"][select]
        assert result.candidates == first["candidates_by_criterion"][select]
        assert result.summary["candidates_by_criterion"] == first["candidates_by_criterion"]
    with pytest.raises(mt.UsageError, match="select must be one of averaged, tokens, time-average"):
        mt.search_k(problem, select="best", **common)


def test_cli_rejects_an_unknown_criterion_in_one_line(tmp_path, capsys):
    assert sim_main([*SETTING, "--k-select", "gradient"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--k-select: unknown value 'gradient'" in err[0]
    (tmp_path / "c.toml").write_text('k-select = "tokens"\n')
    assert sim_main([*SETTING, "--config", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["k_select"] == "tokens"
    out = capsys.readouterr().out
    assert "tokens*" in out and "best k by criterion: averaged 7, tokens 4, time-average 1" in out


def test_epochs_say_how_many_rounds_each_phase_ran(tmp_path):
    from mpi_teleport.front.cli import run_values
    from mpi_teleport.session.prepare import check_job, prepare
    from mpi_teleport.session.runner import RunContext
    from mpi_teleport.session.settings import resolve

    def run_config(cfg, algorithm, k, files, problem):  # (as the simulator runs one)
        settings = prepare(problem, run_values(cfg, algorithm, k), None,
                           prepared=check_job(cfg), job=cfg)
        return mt.train(problem, settings, None, RunContext(files=files)).summary

    problem = LogisticRegression(4, seed=0)
    problem.n_train = 1000  # (a problem that knows its training-set size
    problem.batch_size = 16  # and its batch size: --epochs converts with the problem's)
    cfg = resolve({"nodes": 4, "k": "auto", "algorithm": "teleportation", "epochs": 2.0,
                   "lr": 0.3, "problem": "mpi_teleport.examples.logistic:problem",
                   "out": str(tmp_path)})
    summary = run_config(cfg, "teleportation", "auto", files=RunFiles(tmp_path), problem=problem)
    config = json.loads((tmp_path / "config.json").read_text())
    written = json.loads((tmp_path / "summary.json").read_text())
    T = math.ceil(2.0 * 1000 / (16 * 4))  # 32
    for record in (config, written, summary):
        assert record["rounds_per_phase"] == T and record["rounds_total"] == 2 * T
        assert "ceil(2 * 1000 / (16 * 4)) = 32" in record["rounds_per_phase_from"]
    assert written["rounds_run"] == 2 * T
    plain = run_config(cfg.replace(epochs=None, rounds=10), "teleportation", "auto",
                       files=RunFiles(None), problem=problem)
    assert plain["rounds_per_phase_from"] == "--rounds 10"


# One MPI job: its summary holds every criterion's value of every candidate
# (candidates_by_criterion), compared whole with the simulator's; which candidate each
# criterion then picks is the same pure function in both (checked per criterion above).
# 'tokens' picks k = 4 of 7, so phase 2 runs k strictly between 1 and n.
@pytest.mark.parametrize("select", ["tokens"])
def test_each_criterion_over_mpi_equals_the_simulator(tmp_path, mpirun, select):
    summary, records = run_sim(tmp_path, select)
    proc = mpirun(7, [*RUN, *SETTING, "--k-select", select, "--out", str(tmp_path / "mpi")],
                  timeout=180)
    assert proc.returncode == 0, proc.stderr
    got = json.loads((tmp_path / "mpi" / "summary.json").read_text())

    assert without_time(read_jsonl(tmp_path / "mpi" / "metrics.jsonl")) == without_time(records)
    drop = ("wall_time_s", "backend")
    assert {k: v for k, v in got.items() if k not in drop} == \
        {k: v for k, v in summary.items() if k not in drop}
    assert got["k"] == {"averaged": 7, "tokens": 4, "time-average": 1}[select]
