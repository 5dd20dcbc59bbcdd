"""A resume refused for a differing value shows the difference: two step-size schedules by
the first round where they differ, with both values and the schedulers' arguments; long
values by the part around their first difference; a script's flags (RunSettings.from_args)
name only the flags the user gave."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.errors import API, CLI, Naming
from mpi_teleport.session import resume as resume_rules
from mpi_teleport.problems.quadratic import Quadratic


def test_a_schedulers_other_gamma_is_shown_at_the_first_round_it_changes(tmp_path):
    torch = pytest.importorskip("torch")
    gen = np.random.default_rng(0)
    X = gen.standard_normal((64, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)

    def run(gamma, **kwargs):
        problem = mt.TorchProblem(lambda: torch.nn.Linear(4, 2), (X, y), nodes=4, seed=1,
                                  batch_size=4)
        return mt.dsgd(problem, nodes=4, rounds=4, out=tmp_path / "run", checkpoint_every=2,
                       optimizer=functools.partial(torch.optim.SGD, lr=1.0),
                       lr=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=20,
                                            gamma=gamma), **kwargs)

    run(0.7)
    with pytest.raises(mt.UsageError) as got:
        run(0.5, resume=tmp_path / "run")
    message = str(got.value)
    assert "\n" not in message
    assert ("lr=StepLR_per_epoch(step_size=20, gamma=0.7), not "
            "StepLR_per_epoch(step_size=20, gamma=0.5) (they differ first at round 100: "
            "0.7 then, 0.5 now)") in message
    run(0.7, resume=tmp_path / "run")  # the same schedule resumes


def test_a_checkpoint_without_the_schedulers_arguments_still_matches():
    old = "function StepLR_per_epoch: lr(0)=1.0, lr(1)=1.0, lr(100)=0.7"
    new = old + " [step_size=20, gamma=0.7]"
    assert resume_rules.mismatch({"lr": old}, {"lr": new}) == []
    assert resume_rules.mismatch({"lr": old}, {"lr": new.replace("0.7", "0.5")}) == ["lr"]
    text = str(resume_rules.refuse_mismatch("resume='r'", {"lr": old}, {"lr": 0.1}, ["lr"], API))
    assert "lr='function StepLR_per_epoch" in text and "not 0.1" in text


def test_long_values_are_shown_around_their_first_difference():
    saved = {"problem_facts": {"name": "x" * 100, "width": 64, "depth": 3}}
    current = {"problem_facts": {"name": "x" * 100, "width": 128, "depth": 3}}
    text = str(resume_rules.refuse_mismatch("--resume r", saved, current, ["problem_facts"], CLI))
    assert "'width': 64" in text and "'width': 128" in text and "\n" not in text


def test_a_scripts_resume_names_only_the_flags_the_user_gave(tmp_path):
    mt.teleportation(Quadratic(n=4, d=3, seed=0), nodes=4, k=2, rounds=4, lr=0.01,
                     out=tmp_path / "q", checkpoint_every=2)
    flags = ["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--resume",
             str(tmp_path / "q")]
    with pytest.raises(mt.UsageError) as got:  # another problem, the lr given right
        mt.RunSettings.from_args([*flags, "--lr", "0.01"], problem=Quadratic(n=4, d=5, seed=0))
    message = str(got.value)
    assert "a problem with dim=3, not 5" in message and "--dim" not in message
    assert "--sigma2" not in message and "--zeta2" not in message
    assert "pass the problem the checkpoint was written with" in message
    with pytest.raises(mt.UsageError) as got:  # --lr not given: its default differs
        mt.RunSettings.from_args(flags, problem=Quadratic(n=4, d=3, seed=0))
    message = str(got.value)
    assert "--lr 0.01, not 0.001 (the default)" in message and "give --lr 0.01" in message
    assert "drop" not in message
    settings = mt.RunSettings.from_args([*flags, "--lr", "0.01"],
                                        problem=Quadratic(n=4, d=3, seed=0))
    assert settings.plan.start == 4
    # the command lines take what is not given from the checkpoint: "drop" stays right there
    named = Naming(True, frozenset({"lr"}))
    assert "give --lr 0.01" in str(resume_rules.refuse_mismatch(
        "--resume r", {"lr": 0.01}, {"lr": 0.02}, ["lr"], named))
    assert "drop --lr" in str(resume_rules.refuse_mismatch(
        "--resume r", {"lr": 0.01}, {"lr": 0.02}, ["lr"], CLI))
