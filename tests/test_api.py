"""The public API: what it exports, its errors, user topologies and problems, and the same
calls under mpirun (tests/in_rank/, run inside the ranks by tests/test_in_rank.py) equal to
the simulator."""
import json
import subprocess
import sys

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.examples.logistic import LogisticRegression
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main
from helpers import without_time


def test_public_surface_is_short_and_documented():
    assert set(mt.__all__) == {"teleportation", "dsgd", "search_k", "train", "RunSettings",
                               "Problem", "TorchProblem",
                               "EvalMetric", "Result", "UsageError", "NonFiniteError",
                               "OutputError", "CsvWriter", "TensorBoardWriter",
                               "Records", "Checkpoints", "Latency", "rounds_per_epoch",
                               "on_root", "Stopped", "add_arguments"}
    for name in ("teleportation", "dsgd", "search_k"):
        doc = getattr(mt, name).__doc__
        assert "Parameters" in doc or "Parameters are" in doc
        assert "Examples" in doc and ">>>" in doc


def test_help_shows_the_api():
    out = subprocess.run([sys.executable, "-c", "import mpi_teleport as mt; help(mt.teleportation)"],
                         capture_output=True, text=True, timeout=60, env={"PAGER": "cat", "PATH": ""})
    assert "Train with Teleportation" in out.stdout and "comm" in out.stdout


def test_numpy_problem_through_the_api_and_the_cli_agree(tmp_path):
    api = mt.teleportation(LogisticRegression(6, seed=2), nodes=6, k=2, rounds=40, lr=0.5,
                           seed=2, log_every=10)
    assert sim_main(["--nodes", "6", "--problem", "mpi_teleport.examples.logistic:problem",
                     "--algorithm", "teleportation", "--k", "2", "--rounds", "40", "--lr", "0.5",
                     "--seed", "2", "--log-every", "10", "--out", str(tmp_path)]) == 0
    cli = read_jsonl(tmp_path / "metrics.jsonl")
    assert without_time(api.records) == without_time(cli)
    assert json.loads((tmp_path / "summary.json").read_text())["final_loss"] == api.summary["final_loss"]


def test_result_carries_the_averaged_final_model():
    p = Quadratic(n=8, d=3, sigma2=1.0, zeta2=1.0, seed=1)
    result = mt.teleportation(p, nodes=8, k=4, rounds=30, lr=0.05, log_every=30)
    assert result.x.shape == (3,) and result.k == 4
    assert np.isclose(np.sum((result.x - p.x_star()) ** 2), p.validate(result.x[None]))


def test_a_user_topology_function_is_used_and_checked():
    def complete(k, t):
        return np.full((k, k), 1.0 / k)

    p = Quadratic(n=6, d=3, seed=1)
    mine = mt.teleportation(p, nodes=6, k=3, rounds=20, lr=0.05, topology=complete, log_every=5)
    builtin = mt.teleportation(p, nodes=6, k=3, rounds=20, lr=0.05, topology="complete", log_every=5)
    assert [r["error"] for r in mine.records] == pytest.approx([r["error"] for r in builtin.records])
    assert mine.summary["topology"].startswith("custom:")

    def not_stochastic(k, t):
        return np.eye(k) * 0.5

    with pytest.raises(ValueError, match="doubly stochastic"):
        mt.teleportation(p, nodes=6, k=3, rounds=5, lr=0.05, topology=not_stochastic)


@pytest.mark.parametrize("kwargs,match", [
    (dict(k=0), "k must be"),
    (dict(k=9), "k=9 exceeds the number of nodes 8"),  # (the command line's wording)
    (dict(lr=-1.0), "lr must be"),
    (dict(momentum=1.0), "momentum"),
    (dict(variant="fast"), "variant"),
    (dict(topology="star"), "topology: unknown value 'star'"),
    (dict(rounds=0), "rounds must be"),
    (dict(checkpoint_every=5), "needs a place to write"),
])
def test_bad_arguments_are_usage_errors(kwargs, match):
    settings = {**dict(nodes=8, k=2, rounds=10, lr=0.1), **kwargs}
    with pytest.raises(mt.UsageError, match=match):
        mt.teleportation(Quadratic(n=8, d=2), **settings)


def test_something_that_is_not_a_problem_is_refused():
    with pytest.raises(TypeError, match="not a Problem"):
        mt.dsgd(object(), nodes=4, rounds=3, lr=0.1)


# (the API inside mpirun ranks: tests/in_rank/test_api_mpi.py and test_torch_api_mpi.py)


def test_a_factory_problem_runs_under_mpi_like_the_simulator(tmp_path, mpirun):
    flags = ["--problem", "mpi_teleport.examples.logistic:problem", "--algorithm", "compare",
             "--k", "2", "--rounds", "30", "--lr", "0.5", "--log-every", "10", "--progress", "off"]
    assert sim_main(["--nodes", "4", *flags, "--out", str(tmp_path / "sim")]) == 0
    proc = mpirun(4, ["-m", "mpi_teleport.run", *flags, "--out", str(tmp_path / "mpi")], timeout=180)
    assert proc.returncode == 0, proc.stderr
    for alg in ("teleportation", "dsgd"):
        assert without_time(read_jsonl(tmp_path / "mpi" / alg / "metrics.jsonl")) == without_time(
            read_jsonl(tmp_path / "sim" / alg / "metrics.jsonl"))


BROKEN_FACTORIES = [
    ("nosuch_module_xyz:problem", "cannot import 'nosuch_module_xyz'"),
    ("mpi_teleport.examples.logistic:missing", "has no function 'missing'"),
    ("os:getcwd", "the factory failed"),
    ("json:loads", "the factory failed"),
    ("mpi_teleport.examples.logistic:LogisticRegression.evaluate", "unknown value"),
]


@pytest.mark.parametrize("name,fragment", BROKEN_FACTORIES)
def test_a_broken_factory_is_one_line_and_exit_2(capsys, name, fragment):
    assert sim_main(["--nodes", "4", "--problem", name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0] and "Traceback" not in err[0]


IMPORT_FAULTS = [  # (the module's text, fragment of the one line): issue 31, class 3
    ("import sys\nsys.exit(0)\n", "importing 'faulty_mod' called sys.exit(0)"),
    ("import sys\nsys.exit(3)\n", "importing 'faulty_mod' called sys.exit(3)"),
    ("import sys\nsys.exit('usage: x')\n", "called sys.exit('usage: x')"),
    ("raise KeyboardInterrupt\n", "importing it raised KeyboardInterrupt"),
    ("import nosuch_dependency_xyz\n", "No module named 'nosuch_dependency_xyz'; fix the module"),
    ("x = (\n", "importing it raised SyntaxError"),
    ("def problem(nodes, seed):\n    raise KeyboardInterrupt\n",
     "the factory failed (KeyboardInterrupt)"),
    ("def problem(nodes, seed):\n    raise SystemExit('no data')\n",
     "the factory called sys.exit('no data')"),
]


@pytest.mark.parametrize("text,fragment", IMPORT_FAULTS)
def test_a_module_that_exits_or_is_interrupted_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch,
                                                                      text, fragment):
    """Before: sys.exit(0) at import ended the simulator with status 0 having run nothing,
    sys.exit(3) with 3, and KeyboardInterrupt was a traceback."""
    (tmp_path / "faulty_mod.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "faulty_mod", raising=False)
    assert sim_main(["--nodes", "4", "--problem", "faulty_mod:problem", "--rounds", "3"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0] and "faulty_mod:problem" in err[0], captured.err
    assert not captured.out


def test_a_factory_returning_something_else_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "myfactories.py").write_text("def problem(nodes, seed):\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert sim_main(["--nodes", "4", "--problem", "myfactories:problem"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "returned int, not a Problem" in err[0]


# (a broken factory under MPI: a row of tests/test_failures.py's table of bad input under MPI)
