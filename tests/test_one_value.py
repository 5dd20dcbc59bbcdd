"""Either front end makes one value of the same run: for every row of the settings table,
the RunSettings a command line's flags make (``RunSettings.from_args``, the path of
``python -m mpi_teleport.sim`` and a script's flags) equal, ``==``, those the training
functions' keywords make (``RunSettings.from_keywords``), and a training function runs
as ``train`` does with that value, record for record. Serial, no MPI."""
from __future__ import annotations

import dataclasses

import pytest

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.session.settings import rows


class Counted(Quadratic):
    """The quadratic with a training set and a batch size of its own, so that epochs
    count its rounds (as a TorchProblem's do)."""

    n_train, batch_size = 96, 4


BASE_FLAGS = ["--nodes", "8", "--rounds", "20", "--lr", "0.05", "--progress", "off"]
BASE_KEYWORDS = {"nodes": 8, "rounds": 20, "lr": 0.05, "progress": False}


def _case(flags, keywords, function="teleportation", problem=Quadratic):
    return flags, keywords, function, problem


# One run per row, written both ways: the flags (over BASE_FLAGS) and the keywords (over
# BASE_KEYWORDS) of the same run; "{tmp}" is the test's directory.
CASES = {
    "nodes": _case(["--nodes", "6", "--k", "2"], {"nodes": 6, "k": 2}),
    "algorithm": _case(["--algorithm", "dsgd"], {}, "dsgd"),
    "variant": _case(["--k", "2", "--variant", "simple"], {"k": 2, "variant": "simple"}),
    "k": _case(["--k", "4"], {"k": 4}),
    "k_select": _case(["--k", "auto", "--k-select", "tokens"], {"select": "tokens"},
                      "search_k"),
    "topology": _case(["--k", "4", "--topology", "complete"], {"k": 4, "topology": "complete"}),
    "rounds": _case(["--k", "2", "--rounds", "7"], {"k": 2, "rounds": 7}),
    "lr": _case(["--k", "2", "--lr", "0.2"], {"k": 2, "lr": 0.2}),
    "momentum": _case(["--k", "2", "--momentum", "0.5"], {"k": 2, "momentum": 0.5}),
    "nesterov": _case(["--k", "2", "--momentum", "0.5", "--nesterov"],
                      {"k": 2, "momentum": 0.5, "nesterov": True}),
    "target": _case(["--k", "2", "--target", "0.5"], {"k": 2, "target": 0.5}),
    "stop_at_target": _case(["--k", "2", "--target", "0.5", "--stop-at-target"],
                            {"k": 2, "target": 0.5, "stop_at_target": True}),
    "latency": _case(["--k", "2", "--latency", "const:5"], {"k": 2, "latency": "const:5"}),
    "clock": _case(["--k", "2", "--latency", "const:5", "--clock", "virtual"],
                   {"k": 2, "latency": "const:5", "clock": "virtual"}),
    "compute_time": _case(["--k", "2", "--clock", "virtual", "--compute-time", "0.001"],
                          {"k": 2, "clock": "virtual", "compute_time": 0.001}),
    "epochs": _case(["--k", "2", "--epochs", "2"], {"k": 2, "epochs": 2, "rounds": None},
                    problem=Counted),
    "eval_every": _case(["--k", "2", "--eval-every", "5"], {"k": 2, "eval_every": 5}),
    "eval_at_start": _case(["--k", "2", "--no-eval-at-start"], {"k": 2, "eval_at_start": False}),
    "trace": _case(["--k", "2", "--trace", "{tmp}/t.json"], {"k": 2, "trace": "{tmp}/t.json"}),
    "seed": _case(["--k", "2", "--seed", "3"], {"k": 2, "seed": 3}),
    "out": _case(["--k", "2", "--out", "{tmp}/o"], {"k": 2, "out": "{tmp}/o"}),
    "log_every": _case(["--k", "2", "--log-every", "5"], {"k": 2, "log_every": 5}),
    "progress": _case(["--k", "2", "--progress", "on"], {"k": 2, "progress": True}),
    "checkpoint_every": _case(["--k", "2", "--out", "{tmp}/o", "--checkpoint-every", "5"],
                              {"k": 2, "out": "{tmp}/o", "checkpoint_every": 5}),
    "checkpoint_dir": _case(["--k", "2", "--checkpoint-every", "5", "--checkpoint-dir",
                             "{tmp}/c"],
                            {"k": 2, "checkpoint_every": 5, "checkpoint_dir": "{tmp}/c"}),
    "keep_checkpoints": _case(["--k", "2", "--out", "{tmp}/o", "--checkpoint-every", "5",
                               "--keep-checkpoints", "3"],
                              {"k": 2, "out": "{tmp}/o", "checkpoint_every": 5,
                               "keep_checkpoints": 3}),
    "fail": _case(["--k", "2", "--fail", "3@5"], {"k": 2, "fail": "3@5"}),
    "spares": _case(["--k", "2", "--fail", "3@5", "--spares", "1"],
                    {"k": 2, "fail": "3@5", "spares": 1}),
    "optimizer": _case(["--k", "2", "--optimizer", "adam"], {"k": 2, "optimizer": "torch.optim.Adam"}),
    "log_every_epochs": _case(["--k", "2", "--epochs", "2", "--log-every-epochs", "1"],
                              {"k": 2, "epochs": 2, "rounds": None, "log_every_epochs": 1},
                              problem=Counted),
    "eval_every_epochs": _case(["--k", "2", "--epochs", "2", "--eval-every-epochs", "1"],
                               {"k": 2, "epochs": 2, "rounds": None, "eval_every_epochs": 1},
                               problem=Counted),
}

# The rows no training-function keyword takes, and why: the problem object is the
# caller's, and a few settings of the command lines have a Python object in their place.
NOT_KEYWORDS = {
    **{name: "builds the command lines' problem; a Python caller passes its own object"
       for name in ("problem", "sigma2", "zeta2", "dim", "sampling", "alpha", "val_fraction",
                    "data_dir", "download", "device", "batch_size", "threads")},
    "lr_schedule": "lr= takes the schedule as a function of the round",
    "warmup_epochs": "lr= takes the schedule as a function of the round",
    "lr_scheduler": "lr= takes a torch scheduler object",
    "lr_scheduler_args": "lr= takes a torch scheduler object",
    "lr_scheduler_interval": "lr_step= (with lr= a torch scheduler)",
    "optimizer_args": "optimizer= takes a torch optimizer class or factory with its arguments",
    "weight_decay": "optimizer= takes a torch optimizer class or factory with its arguments",
    "betas": "optimizer= takes a torch optimizer class or factory with its arguments",
    "eps": "optimizer= takes a torch optimizer class or factory with its arguments",
    "resume": "compared in test_resume_value below (it needs a checkpoint)",
    "elastic": "needs an MPI job under ULFM (tests/test_elastic_mpi.py)",
    "agree_every": "spaces elastic mode's agreements, chosen by the run in Python",
}


def _fill(value, tmp):
    if value == "torch.optim.Adam":  # (the keyword takes torch's class, imported when used)
        import torch

        return torch.optim.Adam
    if isinstance(value, str):
        return value.replace("{tmp}", str(tmp))
    if isinstance(value, list):
        return [_fill(v, tmp) for v in value]
    if isinstance(value, tuple):
        return tuple(_fill(v, tmp) for v in value)
    if isinstance(value, dict):
        return {k: _fill(v, tmp) for k, v in value.items()}
    return value


def _both(name, tmp, tmp_keywords=None):
    flags, _, function, problem_class = _fill(CASES[name], tmp)
    keywords = _fill(CASES[name][1], tmp if tmp_keywords is None else tmp_keywords)
    keywords = {**BASE_KEYWORDS, **keywords}
    nodes = keywords["nodes"]
    if function != "dsgd":
        flags = ["--algorithm", "teleportation", *flags]
    from_flags = mt.RunSettings.from_args([*BASE_FLAGS, *flags],
                                          problem=problem_class(n=nodes, d=3))
    from_keywords = mt.RunSettings.from_keywords(problem_class(n=nodes, d=3),
                                                 algorithm=function, **keywords)
    return from_flags, from_keywords, function, problem_class, keywords


def test_every_row_is_compared_or_says_why_not():
    names = {row.name for row in rows()}
    assert set(CASES) | set(NOT_KEYWORDS) == names, sorted(names ^ (set(CASES) | set(NOT_KEYWORDS)))
    assert not set(CASES) & set(NOT_KEYWORDS)


def _differences(a, b) -> dict:
    return {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
            if f.compare and getattr(a, f.name) != getattr(b, f.name)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_command_line_and_the_keywords_make_one_value(name, tmp_path):
    from_flags, from_keywords, *_ = _both(name, tmp_path)
    assert _differences(from_flags, from_keywords) == {}
    assert from_flags == from_keywords


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_training_function_runs_as_train_runs_the_command_lines_value(name, tmp_path):
    """``mt.teleportation(p, **kw)`` (or dsgd, search_k) gives the records ``mt.train``
    gives with the value the flags of the same run make (each writing its own files)."""
    from helpers import without_time

    (tmp_path / "flags").mkdir()
    (tmp_path / "keywords").mkdir()
    from_flags, _, function, problem_class, keywords = _both(
        name, tmp_path / "flags", tmp_path / "keywords")
    nodes = keywords["nodes"]
    called = getattr(mt, function)(problem_class(n=nodes, d=3), **keywords)
    trained = mt.train(problem_class(n=nodes, d=3), from_flags)
    assert called.records and without_time(called.records) == without_time(trained.records)
    assert called.k == trained.k and (called.x == trained.x).all()


@pytest.mark.parametrize("flags, keywords, says", [
    (["--checkpoint-every", "5"], {"checkpoint_every": 5}, "needs a place to write"),
    (["--spares", "1"], {"spares": 1}, "needs"),
    (["--fail", "9@2"], {"fail": "9@2"}, "node 9 does not exist"),
])
def test_one_set_of_cross_checks_refuses_a_combination_on_both_front_ends(flags, keywords, says):
    """The rules that tie settings together are one set (settings.cross_checks), which
    both front ends pass through; each spells the message its own way."""
    from mpi_teleport.errors import UsageError

    with pytest.raises(UsageError, match=says) as by_flags:
        mt.RunSettings.from_args([*BASE_FLAGS, "--algorithm", "teleportation", "--k", "2",
                                  *flags], problem=Quadratic(n=8, d=3))
    with pytest.raises(UsageError, match=says) as by_keywords:
        mt.RunSettings.from_keywords(Quadratic(n=8, d=3), k=2, **{**BASE_KEYWORDS, **keywords})
    assert str(by_flags.value).startswith("--") and not str(by_keywords.value).startswith("--")


def test_both_front_ends_call_the_one_cross_check(monkeypatch):
    from mpi_teleport.session import api_checks, settings

    seen = []
    real = settings.cross_checks

    def spy(values, naming, world_size=None):
        seen.append(naming.cli)
        return real(values, naming, world_size)

    monkeypatch.setattr(settings, "cross_checks", spy)
    monkeypatch.setattr(api_checks, "cross_checks", spy)
    mt.RunSettings.from_args([*BASE_FLAGS, "--algorithm", "teleportation", "--k", "2"],
                             problem=Quadratic(n=8, d=3))
    mt.RunSettings.from_keywords(Quadratic(n=8, d=3), k=2, **BASE_KEYWORDS)
    assert seen == [True, False]
