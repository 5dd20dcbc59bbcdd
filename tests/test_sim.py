"""The simulator: equalities with centralized SGD, convergence, determinism, files."""
import json

import numpy as np
import pytest

from mpi_teleport.session.settings import Values, resolve
from mpi_teleport.disk.output import RunFiles, read_jsonl
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main, simulate
from helpers import without_time


def centralized_sgd(n, d, sigma2, zeta2, seed, lr, rounds):
    """Mini-batch SGD on f = mean_i f_i with one stochastic gradient per node per round."""
    p = Quadratic(n=n, d=d, sigma2=sigma2, zeta2=zeta2, seed=seed)
    x = p.initial()
    nodes = np.arange(n)
    errors = [float(np.sum((x - p.x_star()) ** 2))]
    for t in range(rounds):
        g = p.gradient(nodes, np.tile(x, (n, 1)), t).mean(axis=0)
        x = x - lr * g
        errors.append(float(np.sum((x - p.x_star()) ** 2)))
    return errors


@pytest.mark.parametrize("algorithm", ["dsgd", "teleportation"])
def test_complete_graph_with_all_nodes_equals_centralized_sgd(algorithm):
    n, rounds = 12, 40
    cfg = Values.of_job(dict(nodes=n, k=n, topology="complete", rounds=rounds, lr=0.02,
                             sigma2=5.0, zeta2=5.0, dim=7, seed=3, log_every=1))
    files = RunFiles(None)
    simulate(cfg, algorithm, n, files)
    reference = centralized_sgd(n, 7, 5.0, 5.0, 3, 0.02, rounds)
    errors = [r["error"] for r in files.records]
    np.testing.assert_allclose(errors, reference, rtol=1e-10)
    assert all(r["consensus"] < 1e-20 for r in files.records)


def test_error_falls_below_target_on_default_problem():
    cfg = resolve({"nodes": 25})  # all defaults
    summary = simulate(cfg, "teleportation", cfg.k, RunFiles(None))
    assert summary["rounds_to_target"] is not None
    assert summary["final_error"] < 1e-3


def test_identical_seeds_give_identical_outputs(tmp_path):
    for seed, sub in ((1, "a"), (1, "b"), (2, "c")):
        main(["--nodes", "30", "--rounds", "200", "--k", "5", "--topology", "base2",
              "--seed", str(seed), "--momentum", "0.5", "--out", str(tmp_path / sub)])
    for algorithm in ("teleportation", "dsgd"):
        a = without_time(read_jsonl(tmp_path / "a" / algorithm / "metrics.jsonl"))
        b = without_time(read_jsonl(tmp_path / "b" / algorithm / "metrics.jsonl"))
        c = without_time(read_jsonl(tmp_path / "c" / algorithm / "metrics.jsonl"))
        assert a == b
        assert a != c


def test_output_files(tmp_path, capsys):
    assert main(["--nodes", "10", "--algorithm", "teleportation", "--k", "3", "--rounds", "50",
                 "--log-every", "7", "--out", str(tmp_path)]) == 0
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["k"] == 3 and cfg["nodes"] == 10 and cfg["topology"] == "ring"
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["round"] for r in records] == [0, 7, 14, 21, 28, 35, 42, 49, 50]
    assert {"round", "time_s", "error", "consensus"} <= set(records[0])
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("rounds_run", "rounds_to_target", "final_error", "wall_time_s", "k"):
        assert key in summary
    assert summary["rounds_run"] == 50
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    assert "Teleportation (k=3, ring)" in capsys.readouterr().out


def test_stop_at_target():
    cfg = resolve({"nodes": 25, "stop_at_target": True, "log_every": 5})
    files = RunFiles(None)
    summary = simulate(cfg, "teleportation", cfg.k, files)
    assert summary["rounds_run"] == summary["rounds_to_target"] < cfg.rounds


def test_a_million_nodes_with_k_64():
    cfg = Values.of_job(dict(nodes=10**6, k=64, rounds=20, log_every=10, zeta2=1.0, sigma2=1.0))
    summary = simulate(cfg, "teleportation", 64, RunFiles(None))
    assert summary["rounds_run"] == 20 and np.isfinite(summary["final_error"])
