"""Issue 22: what a ported PyTorch script needs from TorchProblem and Problem, in the
simulator (this process). Under MPI: tests/in_rank/test_torch_port_mpi.py.

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
from helpers import without_time  # noqa: E402

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


_numbers = without_time  # (tests/helpers.py)


# ------------------------------------------------------------------ 4. task, partition
def test_d_integer_regression_targets_with_task_regression():
    x, _ = blobs()
    y = np.round(x.sum(1) * 3).astype(np.int64)  # integer targets, not classes
    lin = lambda: torch.nn.Linear(F, 1)  # noqa: E731
    p = TorchProblem(lin, (x, y), nodes=2, task="regression", partition="iid", test=(x[:20], y[:20]))
    assert p.task == "regression" and p.metric == "loss" and not p.higher_is_better
    m = p.evaluate(p.initial()[None])
    assert "accuracy" not in m
    model = p.module(p.initial()).requires_grad_(False)
    want = torch.nn.functional.mse_loss(model(torch.from_numpy(x[:20]))[:, 0],
                                        torch.from_numpy(y[:20]).float())
    assert m["loss"] == pytest.approx(float(want), rel=1e-6)
    r = mt.dsgd(p, nodes=2, rounds=5, lr=0.001)
    assert r.records[-1]["loss"] < r.records[0]["loss"]


def test_d_task_is_inferred_where_unambiguous():
    x, y = blobs()
    multi = np.stack([y % 2, y // 2], 1)  # an integer 0/1 matrix
    assert TorchProblem(mlp, (x, y), nodes=2, test=(x, y)).task == "classification"
    p = TorchProblem(lambda: torch.nn.Linear(F, 2), (x, multi), nodes=2, partition="iid",
                     test=(x, multi))
    assert p.task == "multilabel" and p.metric == "accuracy"
    assert 0 <= p.evaluate(p.initial()[None])["accuracy"] <= 1
    floats = TorchProblem(lambda: torch.nn.Linear(F, 1), (x, y.astype(np.float32)), nodes=2,
                          partition="iid", test=(x, y.astype(np.float32)))
    assert floats.task == "regression"
    with pytest.raises(ValueError, match="partition='iid'"):
        TorchProblem(lambda: torch.nn.Linear(F, 1), (x, y.astype(np.float32)), nodes=2,
                     partition="dirichlet")
    with pytest.raises(ValueError, match="task must be one of"):
        TorchProblem(mlp, (x, y), nodes=2, task="ranking")


def test_d_iid_partition_gives_equal_shuffled_shares():
    p = TorchProblem(mlp, blobs(), nodes=5, seed=3, partition="iid", test=blobs(10))
    sizes = sorted(len(s) for s in p.parts)
    assert sizes[-1] - sizes[0] <= 1 and sum(sizes) == 96
    assert sorted(np.concatenate(p.parts).tolist()) == list(range(96))
    again = TorchProblem(mlp, blobs(), nodes=5, seed=3, partition="iid", test=blobs(10))
    assert all(np.array_equal(a, b) for a, b in zip(p.parts, again.parts))
    with pytest.raises(ValueError, match="'dirichlet', 'iid' or index lists"):
        TorchProblem(mlp, blobs(), nodes=5, partition="random", test=blobs(10))


# ------------------------------------------------------------------ 5. frozen parameters
def frozen_mlp():
    model = mlp()
    model[0].requires_grad_(False)  # a "pretrained" first layer, fine-tuned above
    return model


def test_d_frozen_parameters_are_not_in_the_token_and_stay_fixed():
    p = TorchProblem(frozen_mlp, blobs(), nodes=4, seed=1, test=blobs(20, 1), alpha=1.0)
    assert p.dim == 8 * C + C and p.describe()["n_frozen"] == F * 8 + 8
    result = mt.teleportation(p, nodes=4, k=2, rounds=6, lr=0.2, momentum=0.5)
    trained = p.module(result.x)
    torch.manual_seed(p.seed)  # built again under the problem's seed: the same weights
    ref = frozen_mlp()
    assert torch.equal(trained[0].weight, ref[0].weight) and torch.equal(trained[0].bias, ref[0].bias)
    assert not torch.equal(trained[2].weight, ref[2].weight)


# ------------------------------------------------------------------ 6. training-loop options
def test_d_weight_decay_and_clipping_change_the_gradient_as_documented():
    base = dict(nodes=2, seed=1, test=blobs(10), alpha=1.0)
    plain, wd = TorchProblem(mlp, blobs(), **base), TorchProblem(mlp, blobs(), weight_decay=0.1, **base)
    x = np.stack([plain.initial()] * 2)
    g0, g1 = plain.gradient([0, 1], x, 0), wd.gradient([0, 1], x, 0)
    assert np.array_equal(g1, g0 + np.float32(0.1) * x)
    clip = TorchProblem(mlp, blobs(), clip_norm=0.01, **base).gradient([0, 1], x, 0)
    assert np.all(np.linalg.norm(clip, axis=1) <= 0.01 + 1e-6)
    assert np.allclose(clip / np.linalg.norm(clip, axis=1, keepdims=True),
                       g0 / np.linalg.norm(g0, axis=1, keepdims=True), atol=1e-5)
    with pytest.raises(ValueError, match="weight_decay must be"):
        TorchProblem(mlp, blobs(), weight_decay=-1, **base)


def test_d_eval_loss_is_reported_instead_of_the_training_loss():
    smooth = lambda out, y: torch.nn.functional.cross_entropy(out, y, label_smoothing=0.3)  # noqa: E731
    a = TorchProblem(mlp, blobs(), nodes=2, test=blobs(30, 1), loss=smooth)
    b = TorchProblem(mlp, blobs(), nodes=2, test=blobs(30, 1), loss=smooth,
                     eval_loss=torch.nn.functional.cross_entropy)
    c = TorchProblem(mlp, blobs(), nodes=2, test=blobs(30, 1))
    x = a.initial()[None]
    assert a.evaluate(x)["loss"] != c.evaluate(x)["loss"]
    assert b.evaluate(x)["loss"] == pytest.approx(c.evaluate(x)["loss"], rel=1e-6)
    assert np.array_equal(a.gradient([0], x, 0), b.gradient([0], x, 0))


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(F, C), torch.nn.Embedding(10, C)

    def forward(self, x, token):
        return self.a(x) + self.b(token)


class Pairs(torch.utils.data.Dataset):
    def __init__(self, as_dict=False):
        self.x, self.y = blobs(40)
        self.as_dict = as_dict

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if self.as_dict:
            return {"x": self.x[i], "token": i % 10, "label": int(self.y[i])}
        return self.x[i], i % 10, int(self.y[i])


@pytest.mark.parametrize("as_dict", [False, True])
def test_d_tuple_and_dict_samples_call_the_model_with_several_inputs(as_dict):
    p = TorchProblem(TwoInputs, Pairs(as_dict), nodes=2, alpha=1.0, test=Pairs(as_dict))
    r = mt.dsgd(p, nodes=2, rounds=4, lr=0.1, log_every=2)
    assert [x["round"] for x in r.records] == [0, 1, 2, 4] and np.isfinite(r.records[-1]["loss"])


def test_d_collate_fn_batches_variable_length_text():
    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.out = torch.nn.Embedding(20, 6), torch.nn.Linear(6, 2)

        def forward(self, tokens):
            return self.out(self.emb(tokens).mean(1))

    class Text(torch.utils.data.Dataset):
        def __len__(self):
            return 30

        def __getitem__(self, i):
            return list(range(i % 7 + 1)), i % 2

    def pad(items):
        width = max(len(t) for t, _ in items)
        tokens = torch.tensor([t + [0] * (width - len(t)) for t, _ in items])
        return tokens, torch.tensor([y for _, y in items])

    p = TorchProblem(Bag, Text(), nodes=2, alpha=1.0, collate_fn=pad, test=Text(), batch_size=5)
    assert np.isfinite(mt.dsgd(p, nodes=2, rounds=3, lr=0.1).records[-1]["loss"])
    with pytest.raises(ValueError, match="collate_fn applies to a torch Dataset"):
        TorchProblem(mlp, blobs(), nodes=2, collate_fn=pad)


def test_d_module_and_load_into_give_the_trained_model_back():
    p = TorchProblem(frozen_mlp, blobs(), nodes=2, test=blobs(20, 1), alpha=1.0)
    result = mt.dsgd(p, nodes=2, rounds=3, lr=0.1)
    model = p.module(result.x)
    target = frozen_mlp()
    TorchProblem.load_into(target, result.x)
    assert torch.equal(target[2].weight, model[2].weight)
    with torch.no_grad():
        out = model(torch.from_numpy(blobs(20, 1)[0]))
    loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(blobs(20, 1)[1]))
    assert float(loss) == pytest.approx(result.records[-1]["loss"], rel=1e-6)
    with pytest.raises(ValueError, match="has 3 values"):
        TorchProblem.load_into(frozen_mlp(), np.zeros(3, np.float32))


# ------------------------------------------------------------------ 7. side effects
def test_d_torch_settings_are_scoped_to_the_problems_calls():
    from mpi_teleport.problems.torch_options import _deterministic

    torch.set_num_threads(2)
    _deterministic(False, False)
    try:
        p = TorchProblem(mlp, blobs(), nodes=2, test=blobs(10))
        p.gradient([0], p.initial()[None], 0)
        p.evaluate(p.initial()[None])
        assert torch.get_num_threads() == 2 and not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_num_threads(1)


# ------------------------------------------------------------------ API: epochs, callback
def test_e_epochs_are_converted_with_the_problems_batch_size():
    p = TorchProblem(mlp, blobs(), nodes=4, test=blobs(10), batch_size=6, alpha=1.0)
    r = mt.teleportation(p, nodes=4, k=2, epochs=1.5, lr=0.1, log_every=100)
    assert r.summary["rounds_run"] == 12  # ceil(1.5 * 96 / (6 * 2))
    assert mt.dsgd(p, nodes=4, epochs=1, lr=0.1, log_every=100).summary["rounds_run"] == 4
    with pytest.raises(mt.UsageError, match="give rounds= or epochs="):
        mt.dsgd(p, nodes=4, rounds=3, epochs=1, lr=0.1)
    with pytest.raises(mt.UsageError, match="epochs= needs a problem that knows n_train"):
        mt.dsgd(Minimal(), nodes=4, epochs=1, lr=0.1)


def test_e_callback_sees_every_record_on_the_root_and_can_stop_the_run(tmp_path):
    seen = []
    csv_writer = mt.CsvWriter(tmp_path / "run.csv")

    def callback(record):
        seen.append(record)
        csv_writer(record)
        return record["round"] >= 4  # custom early stopping

    p = TorchProblem(mlp, blobs(), nodes=4, test=blobs(10), alpha=1.0)
    r = mt.teleportation(p, nodes=4, k=2, rounds=20, lr=0.1, log_every=2, callback=callback)
    assert seen == r.records and [s["round"] for s in seen] == [0, 1, 2, 4]
    assert r.summary["rounds_run"] == 4
    csv_writer.close()
    lines = (tmp_path / "run.csv").read_text().splitlines()
    assert lines[0].split(",") == ["round", "time_s", "loss", "accuracy", "consensus",
                                   "epoch", "samples", "lr",  # (where training is: issue 47)
                                   "train_epoch", "epoch_step",  # (issue 57; epoch_end: a bool)
                                   "train_loss", "train_accuracy"]  # (widened at round 1)
    assert lines[1].endswith(",,") and not lines[2].endswith(",")
    assert len(lines) == 5


def test_e_callback_flattens_search_records_for_csv(tmp_path):
    writer = mt.CsvWriter(tmp_path / "s.csv")
    mt.search_k(metric_problem(), nodes=4, rounds=2, lr=0.1, log_every=2, callback=writer)
    writer.close()
    text = (tmp_path / "s.csv").read_text()
    assert text.startswith("round,time_s,phase,k,loss,") and len(text.splitlines()) == 5


def test_e_tensorboard_writer_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    writer = mt.TensorBoardWriter(tmp_path / "tb")
    mt.dsgd(metric_problem(), nodes=4, rounds=2, lr=0.1, log_every=1, callback=writer)
    writer.close()
    assert any((tmp_path / "tb").iterdir())


def test_e_lr_schedule_sees_the_round_within_its_phase():
    seen = []

    def lr(t):
        seen.append(t)
        return 0.05

    mt.search_k(Minimal(), nodes=4, rounds=5, lr=lr, log_every=5)
    # both phases call it with rounds 0..4 of the phase, never phase 2's global 6..9
    # (the API's checks also probe a few rounds of the run, as the phase sees them)
    assert set(range(5)) <= set(seen) and not set(seen) & {6, 7, 8, 9}


def test_e_problem_nodes_must_match_the_run():
    p = TorchProblem(mlp, blobs(), nodes=4, test=blobs(10), alpha=1.0)
    with pytest.raises(mt.UsageError, match="built for nodes=4 but the run has nodes=3"):
        mt.dsgd(p, nodes=3, rounds=2, lr=0.1)


# ------------------------------------------------------------------ Nesterov momentum
def test_d_nesterov_momentum_follows_torch_sgd():
    p = TorchProblem(mlp, blobs(), nodes=1, seed=3, test=blobs(10), batch_size=8)
    lr, mu, rounds = 0.05, 0.9, 5
    result = mt.dsgd(p, nodes=1, rounds=rounds, lr=lr, momentum=mu, nesterov=True)
    model = p.module(p.initial())
    sgd = torch.optim.SGD(model.parameters(), lr=lr, momentum=mu, nesterov=True)
    x = p.initial()
    for t in range(rounds):
        g = p.gradient([0], x[None], t)[0]
        _set_grads(model, g)
        sgd.step()
        x = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()
    assert np.allclose(result.x, x, rtol=0, atol=1e-6)
    heavy = mt.dsgd(p, nodes=1, rounds=rounds, lr=lr, momentum=mu)
    assert not np.allclose(heavy.x, result.x, atol=1e-6)
    with pytest.raises(mt.UsageError, match="nesterov=True needs momentum > 0"):
        mt.dsgd(p, nodes=1, rounds=2, lr=lr, nesterov=True)


def _set_grads(model, g):
    off = 0
    for q in model.parameters():
        q.grad = torch.from_numpy(g[off:off + q.numel()].copy()).view_as(q)
        off += q.numel()


def test_d_warm_start_from_a_vector():
    p = TorchProblem(mlp, blobs(), nodes=2, test=blobs(20, 1), alpha=1.0)
    first = mt.dsgd(p, nodes=2, rounds=4, lr=0.1, log_every=4)
    q = TorchProblem(mlp, blobs(), nodes=2, test=blobs(20, 1), alpha=1.0, x0=first.x)
    assert np.array_equal(q.initial(), first.x)
    assert mt.dsgd(q, nodes=2, rounds=1, lr=0.1).records[0]["loss"] == first.records[-1]["loss"]
    with pytest.raises(ValueError, match="x0 must be"):
        TorchProblem(mlp, blobs(), nodes=2, test=blobs(20, 1), x0=np.zeros(3))


def test_a_a_test_set_that_draws_evaluates_the_same_in_any_split():
    """Augmentation left on in the test Dataset: each evaluation chunk's draws are keyed
    by its position, so any split over ranks gives the same bits, and two calls agree."""
    p = TorchProblem(mlp, blobs(), nodes=2, test=Noisy(30), eval_batch_size=8, alpha=1.0)
    v = p.initial()
    whole = p.evaluation_sums(v)
    assert np.array_equal(whole, np.concatenate([p.evaluation_sums(v, 0, 16),
                                                 p.evaluation_sums(v, 16, 30)]))
    assert np.array_equal(whole, p.evaluation_sums(v))
