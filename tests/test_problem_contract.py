"""The Problem contract is enforced (mpi_teleport/core/contract.py): every violation of what
initial(), gradient(), evaluate() and a step-size function must return is one
UsageError line naming the method and what it must return; gradient()'s return value is
what counts on every back end; non-finite values before any step are blamed on the model
or the data, not the step size; a diverging run says so without numpy warnings."""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.core import contract
from mpi_teleport.runtime.collective import MpiJobWarning, mpi_job_size
from mpi_teleport.errors import NonFiniteError, UsageError

ROOT = Path(__file__).resolve().parents[1]


class Toy:
    """Node i's loss ||x - i||^2 / 2, with one fault switched on by keyword."""

    metric, higher_is_better = "error", False

    def __init__(self, dim=3, dtype=np.float64, **fault):
        self.dim, self.dtype, self.fault = dim, dtype, fault

    def initial(self):
        f = self.fault
        if "initial" in f:
            return f["initial"]
        return np.zeros(self.dim, self.dtype)

    def gradient(self, nodes, x, t, out=None):
        f = self.fault
        target = np.asarray(nodes, dtype=self.dtype)[:, None]
        if f.get("nan_node") in list(nodes):
            target = target.copy()
            target[list(nodes).index(f["nan_node"])] = np.nan
        if "gradient" in f:
            return f["gradient"](x, target, out)
        return np.subtract(x, target, out=out)

    def evaluate(self, x):
        if "evaluate" in self.fault:
            return self.fault["evaluate"]
        return {"error": float(np.mean((x.astype(np.float64) - 1.5) ** 2))}


def run(problem, **kw):
    args = dict(nodes=4, k=2, rounds=6, lr=0.1, log_every=2)
    args.update(kw)
    return mt.teleportation(problem, **args)


def one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# ----------------------------------------------------------------------------- initial()
@pytest.mark.parametrize("x0, words", [
    (np.zeros(7), ["initial()", "7 values", "dim = 3", "(3,)"]),
    (np.zeros((3, 1)), ["initial()", "(3,)"]),
    ([0.0, 0.0, 0.0], ["initial()", "list", "numpy array"]),
    (None, ["initial()", "None"]),
    (np.zeros(3, np.float32), ["initial()", "float32", "float64"]),
    (np.array([0.0, np.nan, 0.0]), ["initial()", "non-finite", "index 1"]),
])
def test_initial_violations_are_one_line(x0, words):
    with pytest.raises(UsageError) as info:
        run(Toy(initial=x0))
    text = one_line(info)
    assert all(w in text for w in words), text


# ----------------------------------------------------------------------------- gradient()
@pytest.mark.parametrize("gradient, words", [
    (lambda x, b, out: None, ["gradient()", "None", "(", "3)"]),
    (lambda x, b, out: (x - b)[:, :2], ["gradient()", "shape", "3)"]),
    (lambda x, b, out: (x - b).astype(np.float32), ["gradient()", "float32", "float64"]),
    (lambda x, b, out: (x - b).tolist(), ["gradient()", "list", "numpy array"]),
    (lambda x, b, out: np.full_like(x, np.inf), ["gradient()", "not finite", "initial model",
                                                  "not a step-size"]),
])
def test_gradient_violations_are_one_line(gradient, words):
    with pytest.raises(UsageError) as info:
        run(Toy(gradient=gradient))
    text = one_line(info)
    assert all(w in text for w in words), text


def test_nan_in_one_nodes_data_is_reported_as_the_data_not_the_step_size():
    with pytest.raises(UsageError) as info:
        mt.dsgd(Toy(nan_node=2), nodes=4, rounds=4, lr=0.1)
    text = one_line(info)
    assert "node 2" in text and "data" in text and "lr" not in text.replace("not a step", "")


def test_a_gradient_that_returns_a_new_array_trains_like_one_that_writes_out():
    """The return value counts (the MPI side of this: tests/test_api_collective.py)."""
    writes = run(Toy(), rounds=10)
    returns = run(Toy(gradient=lambda x, b, out: x - b), rounds=10)
    assert [r["error"] for r in returns.records] == [r["error"] for r in writes.records]
    assert returns.records[-1]["error"] < returns.records[0]["error"]


def test_the_mpi_back_end_steps_on_a_returned_gradient():
    """The MpiBackend's fast path (n thread-ranks over a loopback transport) trains on the
    returned array too (before: tokens frozen), bit for bit as the simulator."""
    import threading

    from loopback import WAIT_S, Hub, Loopback
    from loopback import serialised

    from mpi_teleport.runtime.backends.local import LocalBackend
    from mpi_teleport.runtime.backends.mpi import MpiBackend
    from mpi_teleport.problem import with_defaults
    from mpi_teleport.core.spec import RunSpec

    spec = RunSpec("teleportation", 4, 2, 10, 0.1)
    problem = with_defaults(Toy(gradient=lambda x, b, out: x - b))
    x0 = problem.initial() + 5.0
    phase = spec.phases()[0]
    sim = LocalBackend(problem, spec)
    sim.begin(phase, 0, x0)
    for t in range(10):
        sim.step(t)
    hub = Hub(4)
    backends = [MpiBackend(problem, spec, Loopback(hub, r)) for r in range(4)]
    locked = serialised(phase)

    def rank_main(b):
        b.begin(locked, 0, x0)
        for t in range(10):
            b.step(t)

    threads = [threading.Thread(target=rank_main, args=(b,), daemon=True) for b in backends]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=WAIT_S)
    tokens = {b.held[1]: b.state.x for b in backends if b.held[1] >= 0}
    assert sorted(tokens) == [0, 1]
    for m in (0, 1):
        assert np.array_equal(tokens[m], sim.xs[0][m])
    assert not np.array_equal(tokens[0], x0)  # it trained


def test_landed_copies_into_out_and_checks_each_returned_array():
    problem = mt.problem.with_defaults(Toy())
    x = np.ones((2, 3))
    out = np.empty_like(x)
    assert contract.landed(problem, x * 2, out, x) is out and (out == 2).all()
    with pytest.raises(UsageError, match="shape"):
        contract.landed(problem, np.ones((3, 3)), out, x)


# ----------------------------------------------------------------------------- evaluate()
@pytest.mark.parametrize("metrics, words", [
    (0.5, ["evaluate()", "float", "dict", "'error'"]),
    (None, ["evaluate()", "None", "dict"]),
    ({"loss": 1.0}, ["evaluate()", "without the metric 'error'", "loss"]),
    ({"error": "low"}, ["evaluate()", "'error'", "number"]),
])
def test_evaluate_violations_are_one_line(metrics, words):
    with pytest.raises(UsageError) as info:
        run(Toy(evaluate=metrics))
    text = one_line(info)
    assert all(w in text for w in words), text


def test_non_finite_metric_at_round_0_blames_the_data_not_the_step_size():
    with pytest.raises(NonFiniteError) as info:
        run(Toy(evaluate={"error": float("nan")}))
    text = one_line(info)
    assert "round 0" in text and "data" in text and "lower --lr" not in text


# ----------------------------------------------------------------------------- lr
@pytest.mark.parametrize("lr, words", [  # (round 0: the validator's rule, settings.py)
    (lambda t: -0.1, ["lr", "-0.1", "round 0"]),
    (lambda t: None, ["lr", "None", "number"]),
    (lambda t: "0.1", ["lr", "'0.1'", "number"]),
    (lambda t: float("nan"), ["lr", "nan", "finite"]),
    (lambda t: 0.1 if t < 4 else -1.0, ["lr(5)", "-1.0"]),  # the last round, checked at start
    (lambda t: 0.1 if t < 1 else None, ["lr(1)", "None"]),
])
def test_bad_step_size_functions_are_refused(lr, words):
    with pytest.raises(UsageError) as info:
        run(Toy(), lr=lr)
    text = one_line(info)
    assert all(w in text for w in words), text


def test_a_step_size_going_wrong_mid_run_is_caught_in_that_round():
    with pytest.raises(UsageError, match=r"lr\(3\) returned inf"):
        run(Toy(), rounds=8, lr=lambda t: 0.1 if t != 3 else float("inf"))


def test_good_step_size_functions_run_unchanged():
    ints = run(Toy(), lr=lambda t: 1 if t == 0 else 0)  # ints; zero after round 0: no step
    assert ints.records[1]["error"] == ints.records[-1]["error"]
    numpy = run(Toy(), lr=lambda t: np.float32(0.1))
    plain = run(Toy(), lr=lambda t: float(np.float32(0.1)))
    assert numpy.records == plain.records or [r["error"] for r in numpy.records] == [
        r["error"] for r in plain.records]


# ----------------------------------------------------------------------------- divergence
def test_a_diverging_simulator_run_prints_one_line_and_no_numpy_warning(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mpi_teleport.sim", "--nodes", "4", "--k", "2",
                          "--rounds", "40", "--lr", "1e308", "--algorithm", "teleportation",
                          "--progress", "off"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "non-finite" in lines[0] and "RuntimeWarning" not in res.stderr


def test_errstate_is_scoped_to_the_run():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NonFiniteError):
            run(Toy(), lr=1e308, rounds=20)
        with pytest.raises(RuntimeWarning):  # outside the run numpy warns as before
            np.array([1e308]) * 10


# ----------------------------------------------------------------------------- comm=None
def test_simulator_inside_an_mpi_job_warns(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    with pytest.warns(MpiJobWarning, match="comm=MPI.COMM_WORLD"):
        run(Toy())


def test_mpi_job_size_from_the_launchers_environment():
    assert mpi_job_size({}) == 1
    assert mpi_job_size({"OMPI_COMM_WORLD_SIZE": "1"}) == 1
    assert mpi_job_size({"PMI_SIZE": "3"}) == 3
    assert mpi_job_size({"PMIX_RANK": "2"}) == 3


def test_no_warning_outside_an_mpi_job(monkeypatch):
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MpiJobWarning)
        run(Toy())


@pytest.mark.parametrize("comm, words", [("COMM_WORLD", ["mpi4py", "str"]),
                                         (42, ["mpi4py", "int"])])
def test_a_non_communicator_is_one_line(comm, words):
    with pytest.raises(UsageError) as info:
        run(Toy(), comm=comm)
    assert all(w in one_line(info) for w in words)


# ----------------------------------------------------------------------------- TorchProblem
def _per_sample_loss(out, target):
    import torch

    return torch.nn.functional.cross_entropy(out, target, reduction="none")


def _torch_case(**kw):
    torch = pytest.importorskip("torch")
    from mpi_teleport.problems.torch_problem import TorchProblem

    gen = np.random.default_rng(0)
    X = gen.standard_normal((120, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    args = dict(train=(X, y), test=(X[:40], y[:40]), nodes=4, seed=1, batch_size=8)
    for key, value in kw.items():
        args[key] = value(X, y) if callable(value) else value

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))

    return TorchProblem(mlp, args.pop("train"), **args)


@pytest.mark.parametrize("kw, words", [
    ({"train": lambda X, y: (X, y + 3)}, ["train labels", "2 outputs", "label 4"]),
    ({"train": lambda X, y: (X, y - 1)}, ["train labels", ">= 0", "-1"]),
    ({"test": lambda X, y: (X[:40], y[:40] + 2)}, ["test labels", "2 outputs"]),
    ({"test": lambda X, y: (X[:40, :3], y[:40])}, ["test set", "model cannot take", "(3,)"]),
    ({"train": lambda X, y: (X[:, :3], y)}, ["train set", "model cannot take"]),
    ({"device": "nonsense"}, ["device='nonsense'", "not a torch device"]),
    # the losses' contract (issue 31, class 4; before: a traceback inside the first round,
    # "grad can be implicitly created only for scalar outputs", or at the first evaluation)
    ({"loss": lambda X, y: _per_sample_loss}, ["loss(output, target) returned a tensor of "
                                              "shape (2,)", "scalar tensor"]),
    ({"loss": lambda X, y: lambda out, target: None}, ["loss(output, target) returned None"]),
    ({"loss": lambda X, y: lambda out, target: 0.5}, ["loss(output, target) returned float"]),
    ({"loss": lambda X, y: lambda out, target: out.nosuch},
     ["loss(output, target) raised AttributeError", "make it take the model's output"]),
    ({"eval_loss": lambda X, y: _per_sample_loss}, ["eval_loss(output, target) returned a "
                                                   "tensor of shape (2,)"]),
    ({"train": lambda X, y: (X, y.astype(np.float32)),
      "partition": lambda X, y: [list(range(i, 120, 4)) for i in range(4)], "test": None},
     ["the default loss of task 'regression' (mean squared error) raised ValueError",
      "target of shape (2,) and dtype float32", "give integer class labels for classification"]),
])
def test_torch_problem_bad_inputs_are_one_line(kw, words):
    with pytest.raises(UsageError) as info:
        _torch_case(**kw)
    text = one_line(info)
    assert all(w in text for w in words), text


def test_torch_problem_cuda_without_a_gpu_is_one_line():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(UsageError) as info:
        _torch_case(device="cuda")
    assert "no CUDA device" in one_line(info)
