"""Issue 22: what a ported PyTorch script needs from TorchProblem and Problem, in the
simulator (this process). Under mpirun: tests/test_torch_port_mpi.py.

1. random augmentation keyed by (seed, node, t); 2. custom metrics through EvalMetric;
3. Problem defaults and evaluation without a test set; 4. task and partition; 5. frozen
parameters; 6. training-loop options; 7. no process-wide torch side effects.
"""
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpi_teleport as mt  # noqa: E402
from mpi_teleport.problem import with_defaults  # noqa: E402
from mpi_teleport.problems.torch_problem import TorchProblem  # noqa: E402

pytestmark = pytest.mark.torch
torch.set_num_threads(1)  # reference computations here as the problem computes them

F, C = 5, 4


def blobs(n=96, seed=0):
    gen = np.random.default_rng(seed)
    y = gen.integers(0, C, n)
    x = (gen.standard_normal((n, F)) + y[:, None]).astype(np.float32)
    return x, y


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.ReLU(), torch.nn.Linear(8, C))


class Noisy(torch.utils.data.Dataset):
    """Augmentation the usual way: the transform draws from the global generators."""

    def __init__(self, n=40):
        self.x, self.y = blobs(n)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = torch.from_numpy(self.x[i]) + 0.1 * torch.randn(F)
        x = x * float(np.random.uniform(0.9, 1.1)) + random.uniform(-0.1, 0.1)
        return x, int(self.y[i])


def noisy_problem(**kw):
    return TorchProblem(mlp, Noisy(), nodes=2, seed=5, test=blobs(30, 1), batch_size=4,
                        alpha=1.0, **kw)


# ------------------------------------------------------------------ 1. randomness
def test_a_transforms_draws_are_keyed_by_seed_node_and_round():
    p, q = noisy_problem(), noisy_problem()
    x = np.stack([p.initial()] * 2)
    states = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    g = p.gradient([0, 1], x, t=3)
    assert torch.equal(states[0], torch.get_rng_state())  # the caller's generators untouched
    assert np.array_equal(states[1], np.random.get_state()[1]) and states[2] == random.getstate()
    torch.manual_seed(123), np.random.seed(9), random.seed(4)  # the caller's state: no effect
    assert np.array_equal(g, q.gradient([0, 1], x, t=3))  # another process, same numbers
    assert np.array_equal(g[1:], p.gradient([1], x[1:], t=3))  # one row alone: an MPI rank
    assert not np.array_equal(g, p.gradient([0, 1], x, t=4))  # new draws in the next round


def test_a_draws_differ_between_rounds_for_the_same_batch():
    """One sample per node: only the augmentation can make two rounds differ."""
    x1 = np.ones((2, F), np.float32)
    ds = torch.utils.data.TensorDataset(torch.from_numpy(x1), torch.tensor([0, 1]))

    class Jitter(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            x, y = ds[i]
            return x + torch.rand(F) + float(np.random.rand()) + random.random(), y

    p = TorchProblem(mlp, Jitter(), nodes=2, partition=[[0], [1]], test=blobs(8), batch_size=1)
    x = np.stack([p.initial()] * 2)
    grads = [p.gradient([0, 1], x, t) for t in range(3)]
    assert not np.array_equal(grads[0], grads[1]) and not np.array_equal(grads[1], grads[2])
    assert np.array_equal(grads[2], p.gradient([0, 1], x, 2))


def test_a_augment_hook_gets_a_keyed_generator():
    seen = []

    def augment(inputs, generator):
        assert isinstance(generator, torch.Generator)
        noise = torch.randn(inputs.shape, generator=generator)
        seen.append(noise[0, 0].item())
        return inputs + 0.5 * noise

    p = TorchProblem(mlp, blobs(), nodes=3, seed=2, test=blobs(20, 1), batch_size=4,
                     alpha=1.0, augment=augment)
    x = np.stack([p.initial()] * 3)
    g = p.gradient([0, 1, 2], x, t=1)
    assert np.array_equal(g[2:], p.gradient([2], x[2:], t=1))
    assert seen[2] == seen[3]  # node 2, round 1: the same draws alone
    p.gradient([0], x[:1], t=2)
    assert seen[-1] != seen[0]
    plain = TorchProblem(mlp, blobs(), nodes=3, seed=2, test=blobs(20, 1), batch_size=4, alpha=1.0)
    assert not np.array_equal(g, plain.gradient([0, 1, 2], x, t=1))


def test_a_two_simulator_runs_with_augmentation_are_equal():
    def run():
        return mt.teleportation(noisy_problem(), nodes=2, k=1, rounds=6, lr=0.1, log_every=3)

    a, b = run(), run()
    assert _numbers(a.records) == _numbers(b.records) and np.array_equal(a.x, b.x)


# ------------------------------------------------------------------ 2. metrics
class Top2(mt.EvalMetric):
    name, size, higher_is_better = "top2", 1, True

    def sums(self, output, target):
        return [(output.topk(2, dim=1).indices == target[:, None]).any(1).sum()]

    def value(self, totals, count):
        return totals[0] / count


class MacroF1(mt.EvalMetric):
    name, higher_is_better = "macro_f1", True

    def __init__(self, n):
        self.n, self.size = n, 3 * n

    def sums(self, output, target):
        pred = output.argmax(1)
        return torch.cat([torch.bincount(target[pred == target], minlength=self.n),
                          torch.bincount(pred, minlength=self.n),
                          torch.bincount(target, minlength=self.n)])

    def value(self, totals, count):
        tp, pred, true = np.split(totals, 3)
        return float(np.mean(2 * tp / np.maximum(pred + true, 1)))


def metric_problem(**kw):
    settings = dict(nodes=4, seed=1, test=blobs(70, 3), batch_size=8, alpha=1.0,
                    eval_batch_size=16, metrics=[Top2(), MacroF1(C)], metric="macro_f1",
                    validation_fraction=0.25)
    settings.update(kw)
    return TorchProblem(mlp, blobs(), **settings)


def test_b_custom_metrics_are_computed_from_chunk_sums():
    p = metric_problem()
    x = np.stack([p.initial() + 0.3 * np.random.default_rng(0).standard_normal(p.dim)
                  .astype(np.float32)] * 2)
    m = p.evaluate(x)
    model = p.module(p.average(x)).eval().requires_grad_(False)
    xt, yt = blobs(70, 3)
    out = model(torch.from_numpy(xt))
    yt = torch.from_numpy(yt)
    assert m["top2"] == Top2().value(np.array([float(Top2().sums(out, yt)[0])]), 70)
    assert m["macro_f1"] == pytest.approx(MacroF1(C).value(
        MacroF1(C).sums(out, yt).double().numpy(), 70))
    # any chunk-aligned split (ranks) gives the same bits
    whole = p.evaluation_sums(p.average(x))
    parts = [p.evaluation_sums(p.average(x), lo, hi) for lo, hi in [(0, 32), (32, 48), (48, 70)]]
    assert np.array_equal(whole, np.concatenate(parts))
    assert p.metric == "macro_f1" and p.higher_is_better
    assert p.validate(x) == p.metrics_from_sums(
        p.evaluation_sums(p.average(x), split="validation"))["macro_f1"]


def test_b_search_k_selects_by_the_custom_metric():
    result = mt.search_k(metric_problem(), nodes=4, rounds=4, lr=0.1, log_every=2)
    assert result.summary["validation"] == "validation macro_f1"
    assert result.summary["final_macro_f1"] == result.records[-1]["macro_f1_by_k"][str(result.k)]
    assert all("top2" in r for r in result.records if r["phase"] == 1)


def test_b_overriding_evaluate_is_refused_at_construction():
    class Mine(TorchProblem):
        def evaluate(self, x):
            return {**super().evaluate(x), "mine": 1.0}

    with pytest.raises(TypeError, match="MPI back end does not call.*metrics="):
        Mine(mlp, blobs(), nodes=2, test=blobs(10))

    class Whole(Mine):  # overriding the chunked evaluation too is the user's to keep right
        def metrics_from_sums(self, sums, x=None):
            return super().metrics_from_sums(sums, x)

    Whole(mlp, blobs(), nodes=2, test=blobs(10))


@pytest.mark.parametrize("bad, match", [
    ([object()], "lacks 'name'"),
    ([Top2(), Top2()], "is taken"),
])
def test_b_bad_metrics_are_refused(bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        TorchProblem(mlp, blobs(), nodes=2, test=blobs(10), metrics=bad)


def test_b_unknown_headline_metric_is_refused():
    with pytest.raises(ValueError, match="metric must be one of loss, accuracy, top2"):
        TorchProblem(mlp, blobs(), nodes=2, test=blobs(10), metrics=[Top2()], metric="f1")


# ------------------------------------------------------------------ 3. defaults
class Minimal:
    """The documented minimum: dim, dtype, initial, gradient, evaluate."""
    dim, dtype = 3, np.float64

    def initial(self):
        return np.zeros(3)

    def gradient(self, nodes, x, t, out=None):
        return np.subtract(x, np.asarray(nodes, np.float64)[:, None], out=out)

    def evaluate(self, x):
        return {"error": float(np.mean((x.mean(0) - 1.5) ** 2)), "spread": float(x.std())}


def test_c_a_minimal_problem_runs_with_default_metric_and_direction():
    p = with_defaults(Minimal())
    assert p.metric == "error" and p.higher_is_better is False
    result = mt.dsgd(Minimal(), nodes=4, rounds=20, lr=0.1, target=0.5)
    assert result.summary["final_error"] < 2.25 and result.summary["rounds_to_target"]

    class Scored(Minimal):
        def evaluate(self, x):
            return {"val_accuracy": 1.0}

    assert with_defaults(Scored()).higher_is_better is True


def test_c_without_a_test_set_the_training_loss_is_evaluated_on_a_fixed_sample():
    x, y = blobs(1500)
    p = TorchProblem(mlp, (x, y), nodes=2, seed=4, batch_size=8, alpha=1.0)
    assert p.metric == "loss" and not p.higher_is_better and p.n_test == 1000
    assert p.describe()["evaluated_on"] == "train sample of 1000"
    q = TorchProblem(mlp, (x, y), nodes=2, seed=4, batch_size=8, alpha=1.0)
    tok = np.stack([p.initial()])
    assert p.evaluate(tok) == q.evaluate(tok)
    small = TorchProblem(mlp, blobs(30), nodes=2, batch_size=8, alpha=1.0)
    model = small.module(small.initial()).eval().requires_grad_(False)
    xs, ys = blobs(30)
    want = torch.nn.functional.cross_entropy(model(torch.from_numpy(xs)), torch.from_numpy(ys))
    assert small.evaluate(small.initial()[None])["loss"] == pytest.approx(float(want), rel=1e-6)


def _numbers(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]
