"""Bad inputs to the Python API, one table beside the command line's (test_bad_inputs.py).

Every row calls the API in this process and must end in one ``mt.UsageError`` of one line
holding the row's key words: never another exception (a traceback from deep inside) and
never a run. The API checks its arguments with the command line's rules
(:mod:`mpi_teleport.session.settings`), so the last test checks that both say the same words.
"""
from __future__ import annotations

import pytest

import mpi_teleport as mt
from mpi_teleport.session.settings import resolve
from mpi_teleport.problems.quadratic import Quadratic

BASE = dict(nodes=4, k=2, rounds=3, lr=0.1)


def _boom(t):
    raise ZeroDivisionError("no step size")


# (id, function, keyword arguments over BASE, key words of the one line)
ROWS = [
    ("momentum-string", "teleportation", dict(momentum="0.9"), "momentum: expected a number, got '0.9'"),
    ("momentum-one", "teleportation", dict(momentum=1.0), "momentum must be in [0, 1)"),
    ("momentum-negative", "teleportation", dict(momentum=-0.1), "momentum must be in [0, 1)"),
    ("momentum-nan", "teleportation", dict(momentum=float("nan")), "momentum must be a finite number"),
    ("seed-string", "teleportation", dict(seed="abc"), "seed: expected an integer, got 'abc'"),
    ("seed-float", "teleportation", dict(seed=1.5), "seed: expected an integer"),
    ("seed-negative", "teleportation", dict(seed=-1), "seed must be in [0, 2^63)"),
    ("seed-too-big", "teleportation", dict(seed=2**63), "seed must be in [0, 2^63)"),
    ("seed-bool", "teleportation", dict(seed=True), "seed: expected an integer, got True"),
    ("k-float", "teleportation", dict(k=2.0), "k: expected an integer, got 2.0"),
    ("k-zero", "teleportation", dict(k=0), "k must be at least 1"),
    ("k-above-n", "teleportation", dict(k=5), "k=5 exceeds the number of nodes 4"),
    ("k-none", "teleportation", dict(k=None), "k: expected an integer, got None"),
    ("nodes-bool", "teleportation", dict(nodes=True), "nodes: expected an integer, got True"),
    ("nodes-zero", "teleportation", dict(nodes=0), "nodes must be at least 1"),
    ("nodes-string", "dsgd", dict(nodes="4"), "nodes: expected an integer"),
    ("rounds-string", "teleportation", dict(rounds="3"), "rounds: expected an integer"),
    ("rounds-zero", "dsgd", dict(rounds=0), "rounds must be at least 1"),
    ("lr-none", "teleportation", dict(lr=None), "lr: expected a number > 0 or a function"),
    ("lr-string", "teleportation", dict(lr="0.1"), "lr: expected a number > 0 or a function"),
    ("lr-zero", "teleportation", dict(lr=0), "lr must be > 0"),
    ("lr-negative", "dsgd", dict(lr=-0.1), "lr must be > 0"),
    ("lr-nan", "teleportation", dict(lr=float("nan")), "lr must be a finite number"),
    ("lr-inf", "teleportation", dict(lr=float("inf")), "lr must be a finite number"),
    ("lr-function-negative", "teleportation", dict(lr=lambda t: -0.1), "must return a finite number > 0"),
    ("lr-function-none", "teleportation", dict(lr=lambda t: None), "returned None at round 0"),
    ("lr-function-raises", "teleportation", dict(lr=_boom), "failed at round 0 (ZeroDivisionError"),
    ("log-every-zero", "teleportation", dict(log_every=0), "log_every must be at least 1"),
    ("log-every-float", "teleportation", dict(log_every=2.5), "log_every: expected an integer"),
    ("target-zero", "teleportation", dict(target=0), "target must be > 0"),
    ("target-string", "teleportation", dict(target="x"), "target: expected a number"),
    ("stop-at-target-string", "teleportation", dict(stop_at_target="yes"), "stop_at_target: expected true or false"),
    ("variant", "teleportation", dict(variant="fast"), "variant: unknown value 'fast'"),
    ("variant-none", "search_k", dict(variant=None), "variant: unknown value None"),
    ("topology", "dsgd", dict(topology="star"), "topology: unknown value 'star'"),
    ("topology-number", "teleportation", dict(topology=3), "topology: unknown value 3"),
    ("latency-text", "teleportation", dict(latency="slow"), "latency 'slow': unknown model"),
    ("latency-number", "teleportation", dict(latency=5), "latency: expected a latency spec"),
    ("clock", "teleportation", dict(clock="fast"), "clock: unknown value 'fast'"),
    ("compute-time-negative", "teleportation", dict(compute_time=-1), "compute_time must be"),
    ("compute-time-string", "teleportation", dict(compute_time="1"), "compute_time: expected a number"),
    ("keep-checkpoints-zero", "teleportation", dict(keep_checkpoints=0), "keep_checkpoints must be at least 1, got 0"),
    ("keep-checkpoints-negative", "dsgd", dict(keep_checkpoints=-1), "keep_checkpoints must be at least 1, got -1"),
    ("checkpoint-every-negative", "teleportation", dict(checkpoint_every=-1), "checkpoint_every must be >= 0"),
    ("checkpoint-every-nowhere", "teleportation", dict(checkpoint_every=2), "needs a place to write"),
    ("out-empty", "teleportation", dict(out=""), "out is empty"),
    ("out-nul", "teleportation", dict(out="a\0b"), "contains a NUL byte"),
    ("out-number", "dsgd", dict(out=5), "out: expected a path"),
    ("checkpoint-dir-empty", "teleportation", dict(checkpoint_dir="", checkpoint_every=1), "checkpoint_dir is empty"),
    ("resume-empty", "teleportation", dict(resume=""), "resume is empty"),
    ("progress-string", "teleportation", dict(progress="yes"), "progress: expected true or false"),
    ("comm-string", "teleportation", dict(comm="world"), "comm: expected an mpi4py communicator"),
    ("select", "search_k", dict(select="best"), "select must be one of"),
    # a user's topology function that fails or returns no mixing matrix: refused at the
    # start, naming the function, k and t (issue 31, class 4; before: a traceback)
    ("topology-fn-strings", "teleportation", dict(topology=lambda k, t: [["a"] * k] * k),
     "topology function <lambda>(k=2, t=0) returned a list that is not an array of numbers"),
    ("topology-fn-none", "teleportation", dict(topology=lambda k, t: None),
     "returned None; it must return W(t), a 2 x 2 array of numbers >= 0"),
    ("topology-fn-raises", "dsgd", dict(topology=lambda k, t: {}[t]),
     "topology function <lambda>(k=4, t=0) raised KeyError: 0"),
    ("topology-fn-one-argument", "teleportation", dict(topology=lambda k: None),
     "raised TypeError: <lambda>() takes 1 positional argument but 2 were given; a topology "
     "function is called as f(k, t)"),
    ("topology-fn-ragged", "teleportation", dict(topology=lambda k, t: [[1.0], [0.5, 0.5]]),
     "returned a list that is not an array of numbers"),
    ("topology-fn-shape", "teleportation", dict(topology=lambda k, t: [[1.0]]),
     "returned a matrix of shape (1, 1); it must return W(t), a 2 x 2 array"),
    ("topology-fn-last-round", "teleportation",
     dict(topology=lambda k, t: [[1.0, 0.0], [0.0, 1.0]] if t < 2 else [[2.0, 0], [0, 2.0]]),
     "topology function <lambda>(k=2, t=2) returned a matrix that is not doubly stochastic"),
    ("topology-fn-search-candidate", "search_k",
     dict(topology=lambda k, t: __import__("numpy").eye(k) if k != 1 else [[0.5]]),
     "topology function <lambda>(k=1, t=3) returned a matrix that is not doubly stochastic"),
    # eval_every_epochs names itself, not epochs= (issue 50, class 3)
    ("eval-every-epochs-zero", "teleportation", dict(eval_every_epochs=0),
     "eval_every_epochs must be a number > 0, got 0"),
    ("eval-every-epochs-numpy", "dsgd", dict(eval_every_epochs=1.0),
     "eval_every_epochs= needs a problem that knows n_train and batch_size"),
    ("eval-every-epochs-and-rounds", "teleportation", dict(eval_every_epochs=1.0, eval_every=2),
     "give eval_every= (rounds) or eval_every_epochs= (epochs), not both"),
    # records at epoch ends (issue 57)
    ("log-every-epochs-zero", "teleportation", dict(log_every_epochs=0),
     "log_every_epochs must be at least 1, got 0"),
    ("log-every-epochs-numpy", "dsgd", dict(log_every_epochs=1),
     "log_every_epochs: Quadratic does not know its epochs (n_train, batch_size); use "
     "log_every"),
    ("log-every-epochs-in-records", "teleportation", dict(records=mt.Records(log_every_epochs=0)),
     "log_every_epochs must be at least 1, got 0"),
]


def _call(function: str, kwargs: dict):
    settings = {**BASE, **kwargs}
    if function != "teleportation":
        settings.pop("k", None)
    return getattr(mt, function)(Quadratic(n=4, d=2), **settings)


@pytest.mark.parametrize("function,kwargs,says", [row[1:] for row in ROWS],
                         ids=[row[0] for row in ROWS])
def test_a_bad_argument_is_one_usage_error_line(function, kwargs, says):
    with pytest.raises(mt.UsageError) as caught:
        _call(function, kwargs)
    message = str(caught.value)
    assert says in message
    assert "\n" not in message and "Traceback" not in message


def test_a_missing_resume_directory_is_one_line(tmp_path):
    with pytest.raises(mt.UsageError, match="no complete checkpoint of a teleportation run"):
        _call("teleportation", dict(resume=tmp_path / "nothing"))


def test_out_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(mt.UsageError, match="exists and is not a directory"):
        _call("teleportation", dict(out=tmp_path / "file"))


def test_numpy_numbers_are_accepted():
    import numpy as np

    result = _call("teleportation", dict(nodes=np.int64(4), k=np.int32(2), seed=np.uint8(3),
                                         lr=np.float32(0.1), momentum=np.float64(0.5)))
    assert result.k == 2 and result.summary["seed"] == 3


# the same rule says the same words through the command line and the API
SAME_WORDS = [
    ({"momentum": 1.0}, "momentum must be in [0, 1), got 1.0"),
    ({"seed": -1}, "seed must be in [0, 2^63), got -1"),
    ({"lr": 0.0}, "lr must be > 0, got 0.0"),
    ({"log_every": 0}, "log_every must be at least 1, got 0"),
    ({"keep_checkpoints": 0}, "keep_checkpoints must be at least 1, got 0"),
    ({"checkpoint_every": -2}, "checkpoint_every must be >= 0 (0 = no periodic checkpoints), got -2"),
    ({"target": -1.0}, "target must be > 0, got -1.0"),
    ({"k": 0}, "k must be at least 1 (one active node), got 0"),
]


@pytest.mark.parametrize("setting,words", SAME_WORDS, ids=[next(iter(s)) for s, _ in SAME_WORDS])
def test_the_command_line_and_the_api_say_the_same(setting, words):
    with pytest.raises(mt.UsageError) as api:
        _call("teleportation", setting)
    with pytest.raises(mt.UsageError) as cli:
        resolve({"nodes": 4, "algorithm": "teleportation", **setting})
    assert str(api.value) == words
    name = next(iter(setting))
    assert str(cli.value) == words.replace(name, "--" + name.replace("_", "-"), 1)


# Issue 31, class 9: Algorithm 2 on a problem that cannot validate started, then raised
# ValueError from inside the engine at the first logging round.
def _torch_without_validation(**kwargs):
    torch = pytest.importorskip("torch")
    import numpy as np

    x = np.random.default_rng(0).normal(size=(48, 4)).astype(np.float32)
    return mt.TorchProblem(lambda: torch.nn.Linear(4, 2), (x, (x[:, 0] > 0).astype(np.int64)),
                           nodes=4, batch_size=4, **kwargs)


class _SaysItCannotValidate(Quadratic):
    validation_unavailable = "its held-out set is empty: load one first"


@pytest.mark.parametrize("make,says", [
    (_torch_without_validation, "the TorchProblem has no validation set: build it with "
                                "validation=(X, y) or validation_fraction=0.1"),
    (lambda: _SaysItCannotValidate(n=4, d=3), "its held-out set is empty: load one first"),
], ids=["TorchProblem", "a Problem saying so"])
def test_search_k_on_a_problem_that_cannot_validate_is_refused_at_its_start(tmp_path, make, says):
    calls = []
    with pytest.raises(mt.UsageError) as caught:
        mt.search_k(make(), nodes=4, rounds=10, lr=0.1, log_every=5, out=tmp_path / "run",
                    callback=calls.append)
    line = str(caught.value)
    assert "\n" not in line and says in line and "chooses k by a validation metric" in line
    assert calls == [] and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_teleportation_on_that_problem_still_runs():
    """Only Algorithm 2 needs the validation metric."""
    result = mt.teleportation(_torch_without_validation(), nodes=4, k=2, rounds=4, lr=0.1)
    assert result.summary["rounds_run"] == 4


def test_k_auto_on_a_factory_problem_that_cannot_validate_is_one_line_exit_2(monkeypatch, capsys):
    """The command line's side (under MPI: a row of tests/test_failures.py's table)."""
    pytest.importorskip("torch")
    from pathlib import Path

    from mpi_teleport.sim import main as sim_main

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "scripts"))
    assert sim_main(["--nodes", "4", "--problem", "factories:torch_without_validation", "--k",
                     "auto", "--rounds", "4", "--progress", "off"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "the TorchProblem has no validation set" in lines[0], captured.err
    assert not captured.out


def test_a_topology_turning_invalid_mid_run_is_one_usage_error_line():
    """Past the start's check (rounds 0, 1, 2 and the last): the simulator refuses it at
    that round, in the line MPI's ranks all raise (tests/test_api_collective.py)."""
    seen = []
    with pytest.raises(mt.UsageError) as caught:
        mt.teleportation(Quadratic(n=4, d=2), nodes=4, k=2, rounds=12, lr=0.1, log_every=1,
                         topology=lambda k, t: [[2.0, 0], [0, 2.0]] if t == 6 else [[1.0, 0], [0, 1.0]],
                         callback=lambda record: seen.append(record["round"]))
    message = str(caught.value)
    assert "\n" not in message and message.startswith("topology function ") and "<lambda>(k=2, t=6)" in message
    assert seen == [0, 1, 2, 3, 4, 5, 6]


def test_a_factory_problem_breaking_the_loss_contract_is_one_line_exit_2(monkeypatch, capsys):
    """The command line's side of the TorchProblem loss checks (tests/test_problem_contract.py;
    under MPI: a row of tests/test_failures.py's table)."""
    pytest.importorskip("torch")
    from pathlib import Path

    from mpi_teleport.sim import main as sim_main

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "scripts"))
    assert sim_main(["--nodes", "4", "--problem", "factories:torch_per_sample_loss", "--k", "2",
                     "--rounds", "4", "--progress", "off"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "loss(output, target) returned a tensor of shape (2,)" in lines[0], \
        captured.err
