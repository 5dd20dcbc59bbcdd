"""Inputs that reached internal code unchecked, each one line: a TorchProblem's
``local_nodes`` that names no nodes, a TOML file giving one setting twice (``log-every``
and ``log_every``) or a path as a number (``trace = 5``), the Figure 3 benchmark without
its data, and an optimizer instance stepped already (its state would be discarded)."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.session.settings import from_toml
from mpi_teleport.sim import main as sim_main

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--nodes", "4", "--k", "2", "--rounds", "2", "--algorithm", "teleportation",
         "--progress", "off"]


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _data():
    gen = np.random.default_rng(0)
    X = gen.standard_normal((32, 4)).astype(np.float32)
    return X, (X[:, 0] > 0).astype(np.int64)


@pytest.mark.parametrize("local_nodes", ["bogus", [1.5], [[1]], "0"])
def test_local_nodes_that_name_no_nodes_are_one_line(local_nodes):
    torch = pytest.importorskip("torch")
    with pytest.raises(mt.UsageError) as got:
        mt.TorchProblem(lambda: torch.nn.Linear(4, 2), _data(), nodes=4,
                        local_nodes=local_nodes)
    assert str(got.value) == (f"local_nodes must be 'auto', None or a list of node numbers "
                              f"in 0..3, got {local_nodes!r}")
    assert mt.TorchProblem(lambda: torch.nn.Linear(4, 2), _data(), nodes=4,
                           local_nodes=(0, 2)).local_nodes == (0, 2)


@pytest.mark.parametrize("text, says", [
    ("log-every = 5\nlog_every = 7\n", "'log-every' and 'log_every' are one setting "
                                       "(--log-every); keep one of them"),
    ("trace = 5\n", "--trace (from {path}): expected a path (a string), got 5"),
    ("out = 3.5\n", "--out (from {path}): expected a path (a string), got 3.5"),
])
def test_a_toml_file_that_gives_a_setting_twice_or_a_path_as_a_number(tmp_path, capsys,
                                                                     monkeypatch, text, says):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(mt.UsageError) as got:
        from_toml(str(path))
    assert says.format(path=path) in str(got.value)
    assert sim_main([*SMALL, "--config", str(path)]) == 2
    assert says.format(path=path) in one_line(capsys)
    assert not (tmp_path / "5").exists()
    path.write_text('log-every = 1\ntrace = "t.json"\n')  # (each once, the path a string)
    assert from_toml(str(path)) == {"log_every": 1, "trace": "t.json"}


def test_the_figure3_benchmark_without_its_data_is_one_line(tmp_path, capsys, monkeypatch):
    """--report-only with an empty data folder: refused before anything runs or is
    written (never the real runs nor benchmarks/results)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    sys.modules.pop("figure3_fashion_mnist", None)
    import figure3_fashion_mnist as figure3

    (tmp_path / "empty").mkdir()
    out = tmp_path / "results"
    assert figure3.main(["--recipe", "authors", "--data-dir", str(tmp_path / "empty"),
                         "--out", str(out), "--report-only"]) == 2
    line = one_line(capsys)
    assert line.startswith("figure3_fashion_mnist.py: Fashion-MNIST not found")
    assert not out.exists()


@pytest.mark.parametrize("make, holds", [
    (lambda torch, ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), "momentum_buffer"),
    (lambda torch, ps: torch.optim.Adam(ps, lr=0.1), "exp_avg, exp_avg_sq, step"),
    (lambda torch, ps: torch.optim.AdamW(ps, lr=0.1), "exp_avg, exp_avg_sq, step"),
    (lambda torch, ps: torch.optim.Adadelta(ps, lr=1.0), "step=1"),
])
def test_an_optimizer_stepped_already_is_refused(make, holds):
    torch = pytest.importorskip("torch")
    problem = mt.TorchProblem(lambda: torch.nn.Linear(4, 2), _data(), nodes=4, seed=1,
                              batch_size=4)
    model = torch.nn.Linear(4, 2)
    fresh = make(torch, model.parameters())
    mt.dsgd(problem, nodes=4, rounds=2, optimizer=fresh)  # as built: taken
    model(torch.zeros(1, 4)).sum().backward()
    fresh.step()
    with pytest.raises(mt.UsageError) as got:
        mt.dsgd(problem, nodes=4, rounds=2, optimizer=fresh)
    message = str(got.value)
    assert "it was stepped already" in message and holds in message and "\n" not in message
    assert "pass it as built, before any step(), or as its class or a factory" in message


def test_a_scheduler_to_build_takes_its_one_parameter_by_any_name():
    """``lr=lambda o: StepLR(o, ...)`` is a scheduler built on the optimizer, as ``lambda
    optimizer: ...`` is; a function of the round stays one."""
    torch = pytest.importorskip("torch")
    from torch.optim.lr_scheduler import StepLR

    problem = mt.TorchProblem(lambda: torch.nn.Linear(4, 2), _data(), nodes=4, seed=1,
                              batch_size=4)
    sgd = functools.partial(torch.optim.SGD, lr=0.5)
    runs = [mt.dsgd(problem, nodes=4, rounds=6, log_every=2, optimizer=sgd, lr_step="round",
                    lr=lr).records
            for lr in (lambda optimizer: StepLR(optimizer, 2, 0.5), lambda o: StepLR(o, 2, 0.5),
                       lambda t: 0.5 * 0.5 ** (t // 2))]
    assert _without_time(runs[0]) == _without_time(runs[1])
    assert _without_time(runs[1]) == _without_time(runs[2])


def _without_time(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]
