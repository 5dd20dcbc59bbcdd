"""TorchProblem: any torch module and data set as a Problem (models defined here, not in
the package), and the Problem protocol's defaults."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mpi_teleport.problem import Problem, with_defaults  # noqa: E402
from mpi_teleport.problems.quadratic import Quadratic  # noqa: E402
from mpi_teleport.problems.torch_problem import TorchProblem, chunk_slices  # noqa: E402

N_FEATURES, N_CLASSES = 6, 3
torch.set_num_threads(1)  # the reference computations here, as TorchProblem computes (threads=1)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(N_FEATURES, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, N_CLASSES))


def bn_mlp():
    return torch.nn.Sequential(torch.nn.Linear(N_FEATURES, 5), torch.nn.BatchNorm1d(5),
                               torch.nn.ReLU(), torch.nn.Linear(5, N_CLASSES))


class ModeRecorder(torch.nn.Module):
    """A linear model that records whether each forward pass ran in training mode."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(N_FEATURES, N_CLASSES)
        self.modes = []

    def forward(self, x):
        self.modes.append(self.training)
        return self.fc(x)


def data(n=120, seed=0):
    gen = np.random.default_rng(seed)
    x = gen.standard_normal((n, N_FEATURES)).astype(np.float32)
    y = (np.argmax(x[:, :N_CLASSES], axis=1)).astype(np.int64)
    return x, y


def problem(model=mlp, **kw):
    x, y = data()
    xt, yt = data(50, seed=1)
    train = kw.pop("train", (x, y))
    settings = dict(nodes=4, seed=3, test=(xt, yt), batch_size=8, alpha=1.0)
    settings.update(kw)
    return TorchProblem(model, train, **settings)


def tokens(p, k, scale=0.05, seed=0):
    gen = np.random.default_rng(seed)
    return (p.initial()[None] + scale * gen.standard_normal((k, p.dim))).astype(np.float32)


def test_it_is_a_problem():
    p = problem()
    assert isinstance(p, Problem)
    assert p.dtype == np.float32 and p.initial().dtype == np.float32
    assert p.dim == (N_FEATURES * 8 + 8) + (8 * N_CLASSES + N_CLASSES)
    assert p.metric == "accuracy" and p.higher_is_better and p.validation_higher_is_better
    assert p.n_train == 120 and sum(map(sum, p.class_histogram)) == 120
    facts = p.describe()
    assert list(facts) == ["class_histogram", "task", "n_train", "n_params", "evaluated_on",
                           "device"]
    assert with_defaults(p).describe() == facts


def test_arrays_and_dataset_give_the_same_numbers():
    x, y = data()
    xt, yt = data(50, seed=1)
    arrays = problem()
    ds = problem(train=torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                 test=torch.utils.data.TensorDataset(torch.from_numpy(xt), torch.from_numpy(yt)))
    assert all(np.array_equal(a, b) for a, b in zip(arrays.parts, ds.parts))
    rows = tokens(arrays, 3)
    for t in (0, 5):
        assert np.array_equal(arrays.gradient([0, 2, 3], rows, t), ds.gradient([0, 2, 3], rows, t))
    assert arrays.evaluate(rows) == ds.evaluate(rows)


def test_rows_depend_only_on_seed_node_and_round():
    p = problem()
    rows = tokens(p, 4)
    nodes = [2, 0, 3, 2]
    block = p.gradient(nodes, rows, t=7)
    for r, node in enumerate(nodes):
        alone = p.gradient([node], rows[r:r + 1], t=7)
        assert np.array_equal(alone[0], block[r])
    assert np.abs(block).sum() > 0
    assert not np.array_equal(p.gradient([2], rows[:1], t=8), block[:1])
    again = problem()  # a second process building the same problem
    assert np.array_equal(again.gradient(nodes, rows, t=7), block)


def test_user_partition_is_honoured():
    parts = [np.arange(0, 10), np.arange(10, 60), [60, 61], np.arange(62, 120)]
    p = problem(partition=parts)
    for node, part in enumerate(parts):
        for t in range(5):
            assert set(p.batch(node, t)) <= set(np.asarray(part).tolist())
    # the gradient is the model's mean-loss gradient on exactly that batch
    x, y = data()
    row = tokens(p, 1)
    g = p.gradient([2], row, t=4)[0]
    ref = mlp()
    torch.nn.utils.vector_to_parameters(torch.from_numpy(row[0].copy()), ref.parameters())
    idx = p.batch(2, 4)
    torch.nn.functional.cross_entropy(ref(torch.from_numpy(x[idx])), torch.from_numpy(y[idx])).backward()
    expect = torch.nn.utils.parameters_to_vector([q.grad for q in ref.parameters()]).numpy()
    assert np.array_equal(g, expect)


def test_local_nodes_keep_only_their_data():
    full = problem()
    local = problem(local_nodes=[1], evaluation_part=(0, 1))  # (the whole test set)
    assert len(local._train) == len(full.parts[1]) < len(full._train)
    rows = tokens(full, 1)
    assert np.array_equal(local.gradient([1], rows, 3), full.gradient([1], rows, 3))
    assert local.evaluate(rows) == full.evaluate(rows)
    # one local node alone (an MPI rank) keeps its slice of the evaluation sets only
    rank = problem(local_nodes=[1], eval_batch_size=16)
    assert rank.evaluation_part == (1, 4) and rank.held_slice("test") == (16, 32)
    assert rank.n_test == full.n_test and len(rank._sets["test"]) == 16
    with pytest.raises(ValueError, match="not held here"):
        rank.evaluate(rows)
    with pytest.raises(ValueError, match="not among this problem's local_nodes"):
        local.gradient([0], rows, 3)


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7])
def test_chunk_aligned_slices_give_the_whole_set_bit_for_bit(parts):
    p = problem(eval_batch_size=16)
    rows = tokens(p, 3)
    mean = p.average(rows)
    whole = p.evaluation_sums(mean)
    assert whole.shape == (4, 3) and whole[:, 2].tolist() == [16, 16, 16, 2]
    slices = chunk_slices(p.n_test, 16, parts)
    assert slices[0][0] == 0 and slices[-1][1] == p.n_test
    pieces = np.concatenate([p.evaluation_sums(mean, lo, hi) for lo, hi in slices])
    assert np.array_equal(pieces, whole)
    assert p.metrics_from_sums(pieces, rows) == p.evaluate(rows)
    with pytest.raises(ValueError, match="multiples of 16"):
        p.evaluation_sums(mean, 5, 16)


def test_evaluation_does_not_depend_on_the_chunk_size_more_than_rounding():
    rows = tokens(problem(), 2)
    a, b = problem(eval_batch_size=7).evaluate(rows), problem().evaluate(rows)
    assert a["accuracy"] == b["accuracy"] and math.isclose(a["loss"], b["loss"], rel_tol=1e-6)


def test_train_and_eval_modes():
    p = problem(ModeRecorder)
    rows = tokens(p, 2)
    p.model.modes.clear()
    p.gradient([0, 1], rows, 0)
    assert p.model.modes == [True, True]
    p.model.modes.clear()
    p.evaluate(rows)
    assert p.model.modes == [False]


def test_batchnorm_running_statistics_travel_in_the_token():
    p = problem(bn_mlp)
    bn_params = 2 * 5  # BatchNorm1d(5): weight and bias are parameters
    assert p.n_buffers == 10 and p.dim == p.n_params + 10  # running mean and variance
    n0 = p.n_params
    x0 = p.initial()
    assert np.array_equal(x0[n0:n0 + 5], np.zeros(5)) and np.array_equal(x0[n0 + 5:], np.ones(5))
    rows = tokens(p, 3)
    before = rows.copy()
    nodes = [1, 3, 1]
    g = p.gradient(nodes, rows, t=2)
    assert np.array_equal(rows, before)  # the forward pass updates a copy, not x
    assert not g[:, n0:].any() and g[:, :n0 - bn_params].any()  # buffers: zero gradient
    y = rows - np.float32(0.1) * g
    assert np.array_equal(y[:, n0:], rows[:, n0:])
    p.after_step(nodes, y)
    # the written values are BatchNorm's update from the row's own statistics
    xtr, _ = data()
    for r, node in enumerate(nodes):
        ref = bn_mlp()
        torch.nn.utils.vector_to_parameters(torch.from_numpy(rows[r, :n0].copy()), ref.parameters())
        ref[1].running_mean.copy_(torch.from_numpy(rows[r, n0:n0 + 5]))
        ref[1].running_var.copy_(torch.from_numpy(rows[r, n0 + 5:]))
        ref.train()
        ref(torch.from_numpy(xtr[p.batch(node, 2)]))
        assert np.array_equal(y[r, n0:n0 + 5], ref[1].running_mean.numpy())
        assert np.array_equal(y[r, n0 + 5:], ref[1].running_var.numpy())
    # one row at a time (an MPI rank) writes the same statistics
    for r, node in enumerate(nodes):
        one = rows[r:r + 1] - np.float32(0.1) * p.gradient([node], rows[r:r + 1], t=2)
        p.after_step([node], one)
        assert np.array_equal(one[0], y[r])
    # the integer buffer is not in the token and restarts at its constructed value
    assert int(p.model[1].num_batches_tracked) == 1
    with pytest.raises(ValueError, match="must follow gradient"):
        p.after_step([0], y[:1])
    p.gradient([1], rows[1:2], t=2)  # another run's rows, same node: refused, not mixed up
    with pytest.raises(ValueError, match="not the stepped rows"):
        p.after_step([1], y[:1].copy())
    # evaluation (eval mode) uses the averaged running statistics
    shifted = y.copy()
    shifted[:, n0:n0 + 5] += 1.0
    assert p.evaluate(shifted)["loss"] != p.evaluate(y)["loss"]


def test_staged_path_has_the_same_tokens_as_the_flat_path():
    """What a GPU rank does (model apart from the token, copies both ways), on the CPU:
    same layout, gradients, buffer updates and evaluation."""
    flat, staged = problem(bn_mlp), problem(bn_mlp, staged=True)
    assert flat.state.flat is not None and staged.state.flat is None
    assert np.array_equal(flat.initial(), staged.initial())
    rows = tokens(flat, 2)
    ga, gb = flat.gradient([0, 2], rows, 1), staged.gradient([0, 2], rows, 1)
    assert np.array_equal(ga, gb)
    ya, yb = rows - ga, rows - gb
    flat.after_step([0, 2], ya)
    staged.after_step([0, 2], yb)
    assert np.array_equal(ya, yb) and flat.evaluate(ya) == staged.evaluate(yb)


def test_dropout_is_keyed_and_leaves_the_global_generator_alone():
    def dropout_mlp():
        return torch.nn.Sequential(torch.nn.Linear(N_FEATURES, 16), torch.nn.Dropout(0.5),
                                   torch.nn.Linear(16, N_CLASSES))

    p = problem(dropout_mlp)
    rows = tokens(p, 2)
    state = torch.random.get_rng_state()
    a = p.gradient([0, 1], rows, 4)
    assert torch.equal(state, torch.random.get_rng_state())
    assert np.array_equal(a, p.gradient([0, 1], rows, 4))
    assert np.array_equal(a[1:], p.gradient([1], rows[1:], 4))


def test_builder_and_module_initialisation():
    state = torch.random.get_rng_state()
    a, b = problem(mlp), problem(mlp)
    assert np.array_equal(a.initial(), b.initial())
    assert torch.equal(state, torch.random.get_rng_state())  # builder ran under fork_rng
    assert not np.array_equal(a.initial(), problem(mlp, seed=4).initial())
    torch.manual_seed(11)
    module = mlp()
    weights = [q.detach().clone() for q in module.parameters()]
    p = problem(module)
    expect = np.concatenate([w.numpy().ravel() for w in weights])
    assert np.array_equal(p.initial(), expect)
    p.gradient([0], tokens(p, 1), 0)
    assert all(torch.equal(w, q) for w, q in zip(weights, module.parameters()))  # yours untouched


def test_validation_split_and_regression_targets():
    p = problem(validation_fraction=0.25)
    assert p.n_train == 90 and p.n_validation == 30
    rows = tokens(p, 2)
    assert 0.0 <= p.validate(rows) <= 1.0
    with pytest.raises(ValueError, match="needs a validation set"):
        problem().validate(rows)
    x, _ = data()
    target = x[:, :2].sum(axis=1, keepdims=True)

    def linear():
        return torch.nn.Linear(N_FEATURES, 1)

    reg = TorchProblem(linear, (x, target), nodes=2, seed=0, loss=torch.nn.functional.mse_loss,
                       partition=[np.arange(48), np.arange(48, 96)], validation_fraction=0.2)
    assert reg.metric == "loss" and not reg.higher_is_better and reg.class_histogram is None
    m = reg.evaluate(tokens(reg, 2))
    assert set(m) == {"loss", "consensus"} and m["loss"] > 0
    with pytest.raises(ValueError, match="needs integer class labels"):
        TorchProblem(linear, (x, target), nodes=2, loss=torch.nn.functional.mse_loss,
                     test=(x, target), partition="dirichlet")


def test_bad_inputs_are_clear_errors():
    x, y = data()
    test = (x[:10], y[:10])
    cases = [
        (ValueError, "same length", lambda: TorchProblem(mlp, (x, y[:-1]), nodes=2, test=test)),
        (ValueError, "outside the 120 training samples",
         lambda: TorchProblem(mlp, (x, y), nodes=2, test=test, partition=[[0, 1], [5, 120]])),
        (ValueError, r"partition\[1\] is empty",
         lambda: TorchProblem(mlp, (x, y), nodes=2, test=test, partition=[[0, 1], []])),
        (ValueError, "3 index lists for 2 nodes",
         lambda: TorchProblem(mlp, (x, y), nodes=2, test=test, partition=[[0], [1], [2]])),
        (TypeError, "torch.nn.Module or a function",
         lambda: TorchProblem(42, (x, y), nodes=2, test=test)),
        (TypeError, "returned str",
         lambda: TorchProblem(lambda: "model", (x, y), nodes=2, test=test)),
        (TypeError, "must be float32", lambda: TorchProblem(mlp().double(), (x, y), nodes=2, test=test)),
        (TypeError, "pair \\(inputs, targets\\)", lambda: TorchProblem(mlp, x, nodes=2, test=test)),
        (ValueError, "nodes must be a positive integer", lambda: TorchProblem(mlp, (x, y), nodes=0, test=test)),
        (ValueError, "local_nodes must name nodes",
         lambda: TorchProblem(mlp, (x, y), nodes=2, test=test, local_nodes=[2])),
    ]
    for kind, message, build in cases:
        with pytest.raises(kind, match=message) as e:
            build()
        assert "\n" not in str(e.value)
    p = problem()
    with pytest.raises(ValueError, match="shape"):
        p.gradient([0, 1], tokens(p, 1), 0)


def test_defaults_fill_the_optional_members():
    class Mean:
        dim, dtype, metric, higher_is_better = 2, np.float64, "error", False

        def initial(self):
            return np.zeros(2)

        def gradient(self, nodes, x, t, out=None):
            return np.subtract(x, 1.0, out=out)

        def evaluate(self, x):
            return {"error": float(np.sum((x - 1.0) ** 2)), "spread": 0.0}

    p = with_defaults(Mean())
    x = np.zeros((2, 2))
    assert p.validate(x) == 4.0 and p.validation == "error" and not p.validation_higher_is_better
    assert p.reached({"error": 0.5}, 1.0) and not p.reached({"error": 2.0}, 1.0)
    assert p.finite({"error": 1.0}) and not p.finite({"error": 1.0, "spread": math.nan})
    assert p.n_train is None and p.describe() == {} and with_defaults(p) is p
    p.after_step([0], x)  # nothing to do
    q = with_defaults(Quadratic(n=4, d=3, seed=1))
    assert q.validation == "averaged-model error" and not q.higher_is_better
    assert q.reached({"error": 1e-4, "consensus": 0.0}, 1e-3)
    tp = with_defaults(problem(validation_fraction=0.25))
    assert tp.validation == "validation accuracy" and tp.n_train == 90

    class Broken:
        dim, dtype = 3, np.int32

    with pytest.raises(TypeError, match="lacks initial, gradient, evaluate"):
        with_defaults(Broken())
    bad = Mean()
    bad.dtype = np.int32
    with pytest.raises(TypeError, match="float32 or float64"):
        with_defaults(bad)


def test_problem_modules_import_neither_torch_nor_mpi4py():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import sys; import mpi_teleport.problem, mpi_teleport.problems, "
            "mpi_teleport.problems.network, mpi_teleport.problems.torch_problem, "
            "mpi_teleport.problems.device; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'mpi4py')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=120,
                   env={**os.environ, "PYTHONPATH": root})


def test_chunked_evaluation_equals_models_evaluate():
    """The per-chunk sums, added in chunk order, are what models.evaluate computes in
    batches of the same size (the built-in problems' numbers before TorchProblem)."""
    from mpi_teleport.problems.models import evaluate

    p = problem(eval_batch_size=16)
    vector = p.average(tokens(p, 3))
    xt, yt = data(50, seed=1)
    p.state.load(vector)
    p.model.eval()
    assert p.metrics_from_sums(p.evaluation_sums(vector)) == evaluate(p.model, xt, yt, batch_size=16)


def test_records_say_where_training_is_and_config_names_the_model(tmp_path):
    """Issue 47: every record of a TorchProblem run carries the epoch (fractional), the
    samples drawn so far and the step size of the round just taken; config.json names the
    model's class and the batch size."""
    import functools
    import json

    import mpi_teleport as mt

    gen = np.random.default_rng(0)
    X = gen.standard_normal((64, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    p = mt.TorchProblem(lambda: torch.nn.Linear(4, 2), (X, y), nodes=4, batch_size=8)
    result = mt.teleportation(
        p, nodes=4, k=2, rounds=8, log_every=2, optimizer=torch.optim.Adadelta, out=tmp_path,
        lr=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5))
    where = [(r["round"], r["epoch"], r["samples"], r["lr"]) for r in result.records]
    assert where == [(0, 0.0, 0, 1.0), (1, 0.25, 16, 1.0), (2, 0.5, 32, 1.0), (4, 1.0, 64, 1.0),
                     (6, 1.5, 96, 0.5), (8, 2.0, 128, 0.5)]  # (64 samples, 2 x 8 a round: 4
    # rounds an epoch; round 1: the first batches' record)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model"] == "Linear" and config["batch_size"] == 8 and config["n_params"] == 10
    assert config["optimizer"].startswith("Adadelta(") and "StepLR" in config["lr"]
