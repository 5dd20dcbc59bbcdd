"""Issue 22, point 7: ``--problem mod:fn`` gets ``local_nodes`` and the data flags its
signature names, refuses given flags it does not take, records what it used in
config.json, converts --epochs with the problem's batch size, and is built once in
compare mode."""
import json
import os
import textwrap

import pytest

from mpi_teleport.problems import factory
from mpi_teleport.sim import main as sim_main
from helpers import MEAN_PROBLEM_SOURCE

FACTORIES = MEAN_PROBLEM_SOURCE + textwrap.dedent('''
    import json, os

    CALLS = []

    def data(nodes, seed, local_nodes=None, batch_size=16):
        CALLS.append({"nodes": nodes, "local_nodes": local_nodes, "batch_size": batch_size})
        log = os.environ.get("FACTORY_LOG")
        if log:
            with open(log + "." + str(local_nodes), "w") as f:
                json.dump(local_nodes, f)
        return Mean(nodes, batch_size)

    def anything(nodes, seed, **kwargs):
        CALLS.append(kwargs)
        return Mean(nodes, 10)
''')


@pytest.fixture
def mod(tmp_path, monkeypatch):
    (tmp_path / "my_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    factory._BUILT.clear()
    import importlib
    import sys
    sys.modules.pop("my_factories", None)
    yield importlib.import_module("my_factories")
    sys.modules.pop("my_factories", None)
    factory._BUILT.clear()


def test_the_factory_gets_the_flags_it_takes_once_in_compare_mode(tmp_path, mod):
    out = tmp_path / "out"
    assert sim_main(["--nodes", "4", "--problem", "my_factories:data", "--algorithm", "compare",
                     "--k", "2", "--rounds", "6", "--lr", "0.1", "--batch-size", "8",
                     "--out", str(out), "--progress", "off"]) == 0
    assert mod.CALLS == [{"nodes": 4, "local_nodes": None, "batch_size": 8}]  # built once
    config = json.loads((out / "teleportation" / "config.json").read_text())
    assert config["factory_args"] == {"nodes": 4, "seed": 0, "local_nodes": None, "batch_size": 8}
    assert config["batch_size"] == 8
    assert not {"alpha", "val_fraction", "data_dir", "download", "device"} & set(config)


def test_a_given_flag_the_factory_does_not_take_is_refused(mod, capsys):
    assert sim_main(["--nodes", "4", "--problem", "my_factories:data", "--alpha", "0.5",
                     "--rounds", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the factory takes no alpha, so --alpha would be ignored" in err[0]
    assert mod.CALLS == []


def test_kwargs_take_every_flag(mod):
    assert sim_main(["--nodes", "2", "--problem", "my_factories:anything", "--alpha", "0.5",
                     "--device", "cpu", "--rounds", "2", "--progress", "off"]) == 0
    assert mod.CALLS[0]["alpha"] == 0.5 and mod.CALLS[0]["device"] == "cpu"
    assert set(mod.CALLS[0]) == {"local_nodes", "alpha", "device"}  # given ones, and device


def test_flags_not_given_leave_the_factorys_defaults(mod):
    assert sim_main(["--nodes", "2", "--problem", "my_factories:data", "--rounds", "2",
                     "--progress", "off"]) == 0
    assert mod.CALLS == [{"nodes": 2, "local_nodes": None, "batch_size": 16}]


def test_epochs_use_the_problems_batch_size(tmp_path, mod):
    out = tmp_path / "e"
    assert sim_main(["--nodes", "4", "--problem", "my_factories:anything", "--algorithm",
                     "teleportation", "--k", "2", "--epochs", "1", "--lr", "0.1",
                     "--out", str(out), "--progress", "off"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_run"] == 6  # ceil(120 / (10 * 2)), the problem's batch of 10


@pytest.mark.one_mpi  # (what the CLI passes, not how MPI moves it)
def test_each_rank_gets_its_local_nodes_under_mpi(tmp_path, mpirun):
    (tmp_path / "my_factories.py").write_text(FACTORIES)
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "FACTORY_LOG": str(log)}
    proc = mpirun(2, ["-m", "mpi_teleport.run", "--problem", "my_factories:data", "--rounds",
                      "2", "--algorithm", "dsgd", "--out", str(tmp_path / "m")], env=env,
                  timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.glob("log.*")) == ["log.[0]", "log.[1]"]
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["factory_args"]["local_nodes"] == "[rank]"


def test_a_run_by_epochs_resumes_past_the_default_rounds(tmp_path, mod):
    """--epochs sets the rounds from the data, so a checkpoint past --rounds' default (1000)
    resumes; one past the epochs' rounds is refused in one line."""
    out = tmp_path / "e"
    base = ["--nodes", "4", "--problem", "my_factories:anything", "--algorithm",
            "teleportation", "--k", "2", "--lr", "0.1", "--out", str(out), "--progress", "off",
            "--checkpoint-every", "600"]  # 1 epoch = 6 rounds
    assert sim_main(base + ["--epochs", "250"]) == 0  # checkpoints at 1200 and 1500
    import shutil
    shutil.rmtree(out / "checkpoints" / "round-00001500")  # as if stopped after 1200
    assert sim_main(base + ["--epochs", "250", "--resume", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_run"] == 1500 and (out / "checkpoints" / "round-00001500").is_dir()

