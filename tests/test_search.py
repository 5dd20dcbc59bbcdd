"""Algorithm 2 (--k auto): candidates, disjoint blocks, and the choice it makes."""
from mpi_teleport.session.settings import resolve
from mpi_teleport.disk.output import RunFiles
from mpi_teleport.sim import main, simulate


def search(**settings):
    cfg = resolve({"k": "auto", "algorithm": "teleportation", **settings})
    files = RunFiles(None)
    return simulate(cfg, "teleportation", "auto", files), files.records


def test_picks_k1_where_k1_is_provably_best():
    # No noise, no heterogeneity (x* = 0) and lr = 1/n: a step at node n (curvature n)
    # lands exactly on x* = 0. A single token (k = 1) stays there once it visits node n;
    # any k >= 2 averages that zero with tokens that are not zero, so its averaged-model
    # error stays > 0.
    n = 3
    summary, _ = search(nodes=n, sigma2=0.0, zeta2=0.0, lr=1.0 / n, rounds=20, log_every=1)
    assert summary["candidates"]["1"] == 0.0
    assert all(v > 0 for k, v in summary["candidates"].items() if k != "1")
    assert summary["k"] == 1


def test_picks_k_above_1_on_a_noisy_heterogeneous_problem():
    summary, _ = search(nodes=25, sigma2=10.0, zeta2=10.0, lr=0.001, rounds=1000)
    assert summary["k"] > 1
    assert set(summary["candidates"]) == {"1", "2", "4", "8", "25"}


def test_records_both_phases_and_2T_rounds():
    summary, records = search(nodes=7, rounds=30, log_every=10)
    assert summary["rounds_run"] == 60
    assert [r["round"] for r in records] == [0, 10, 20, 30, 30, 40, 50, 60]
    assert [r["phase"] for r in records] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert set(records[-1]["error_by_k"]) == {"1", "2", "4"}


def test_cli_prints_the_candidates_table(tmp_path, capsys):
    assert main(["--nodes", "7", "--k", "auto", "--algorithm", "teleportation", "--rounds", "40",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Algorithm 2 (k auto)" in out and "<- chosen" in out
    import json

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["k_search"] == "auto" and set(summary["candidates"]) == {"1", "2", "4", "7"}
