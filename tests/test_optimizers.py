"""Issue 30: Adam and AdamW given as PyTorch users give them, their state travelling with
the token (mpi_teleport/core/optimizers.py, mpi_teleport/DESIGN.md §2.6). Under mpirun, with a scheduler
and a resume: tests/in_rank/test_torch_feel_mpi.py."""
import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpi_teleport as mt  # noqa: E402
from mpi_teleport import checkpoint  # noqa: E402
from mpi_teleport.errors import UsageError  # noqa: E402
from mpi_teleport.core.optimizers import Adam, adam_step, from_torch  # noqa: E402
from helpers import without_time  # noqa: E402
from torch_toys import F, Lion, blobs, bn_net, net  # noqa: E402

pytestmark = pytest.mark.torch
torch.set_num_threads(1)
def problem(model=net, nodes=4):
    return mt.TorchProblem(model, blobs(), nodes=nodes, seed=1, test=blobs(24, 1), batch_size=4)


@pytest.mark.parametrize("cls,decoupled", [(torch.optim.Adam, False), (torch.optim.AdamW, True)])
def test_the_step_is_torchs(cls, decoupled):
    gen = np.random.default_rng(0)
    x0 = gen.standard_normal(50).astype(np.float32)
    grads = gen.standard_normal((6, 50)).astype(np.float32)
    param = torch.nn.Parameter(torch.from_numpy(x0.copy()))
    opt = cls([param], lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    rule = Adam((0.8, 0.99), 1e-6, 0.1, decoupled)
    x, v = x0[None].copy(), np.zeros((1, 100), np.float32)
    for step, g in enumerate(grads, 1):
        param.grad = torch.from_numpy(g.copy())
        opt.step()
        out = g[None].copy()
        adam_step(rule, out, x, v, 0.01, step)
        x = out
        np.testing.assert_allclose(x[0], param.detach().numpy(), rtol=1e-6, atol=1e-7)
    state = opt.state[param]
    np.testing.assert_allclose(v[0, :50], state["exp_avg"].numpy(), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(v[0, 50:], state["exp_avg_sq"].numpy(), rtol=1e-6, atol=1e-9)


def test_one_node_trains_as_a_plain_adamw_loop():
    p = problem(nodes=1)
    result = mt.dsgd(p, nodes=1, rounds=25, log_every=25,
                     optimizer=functools.partial(torch.optim.AdamW, lr=0.01, weight_decay=0.05))
    torch.manual_seed(1)
    model = net()
    model.load_state_dict(p.module(p.initial()).state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
    x, y = blobs()
    for t in range(25):
        idx = p.batch(0, t)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x[idx])),
                                          torch.from_numpy(y[idx])).backward()
        opt.step()
    want = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
    np.testing.assert_allclose(result.x, want, rtol=1e-5, atol=1e-6)


def test_given_as_class_factory_or_instance():
    model = net()
    forms = [torch.optim.AdamW, functools.partial(torch.optim.AdamW, lr=1e-3),
             lambda params: torch.optim.AdamW(params), torch.optim.AdamW(model.parameters())]
    found = [from_torch(f) for f in forms]
    assert all(f == found[0] for f in found) and found[0]["rule"].decoupled
    assert found[0]["lr"] == 1e-3 and found[0]["rule"].weight_decay == 0.01
    sgd = from_torch(functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True))
    assert sgd == {"lr": 0.1, "momentum": 0.9, "nesterov": True, "rule": None}
    # SGD through optimizer= trains as momentum= does
    a = mt.dsgd(problem(), nodes=4, rounds=8, log_every=4,
                optimizer=functools.partial(torch.optim.SGD, lr=0.1, momentum=0.5))
    b = mt.dsgd(problem(), nodes=4, rounds=8, log_every=4, lr=0.1, momentum=0.5)
    assert without_time(a.records) == without_time(b.records)


@pytest.mark.parametrize("optimizer,words", [
    (torch.optim.LBFGS, "optimizer=LBFGS re-evaluates the loss through a closure"),
    (torch.optim.SparseAdam, "optimizer=SparseAdam: its step() from a gradient alone raised "
                             "RuntimeError: SparseAdam does not support dense gradients"),
    (torch.optim.ASGD, "optimizer=ASGD: its scalar state 'eta' depends on the step size"),
    ("adam", "expected a torch.optim optimizer"),
])
def test_what_is_not_run_is_one_line(optimizer, words):
    with pytest.raises(UsageError) as info:
        mt.dsgd(problem(), nodes=4, rounds=2, optimizer=optimizer)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_sgd_weight_decay_is_torchs_l2_term_on_the_parameters():
    sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    a = mt.teleportation(problem(bn_net), nodes=4, k=2, rounds=8, log_every=4, optimizer=sgd)
    b = mt.teleportation(mt.TorchProblem(bn_net, blobs(), nodes=4, seed=1, test=blobs(24, 1),
                                         batch_size=4, weight_decay=0.01),
                         nodes=4, k=2, rounds=8, log_every=4, lr=0.1, momentum=0.9, nesterov=True)
    assert without_time(a.records) == without_time(b.records)


def test_other_refusals():
    with pytest.raises(UsageError, match="not both"):
        mt.dsgd(problem(), nodes=4, rounds=2, optimizer=torch.optim.Adam, momentum=0.9)
    with pytest.raises(UsageError, match="lr: expected a number > 0 or a function"):
        mt.dsgd(problem(), nodes=4, rounds=2)
    # (the latency layer and elastic mode run any optimizer: issue 47; tests below and
    # tests/in_rank/test_torch_optimizers_mpi.py, tests/test_optimizers_elastic_mpi.py)


def test_the_state_is_checkpointed_and_a_resume_is_bit_for_bit(tmp_path):
    sched = lambda: torch.optim.lr_scheduler.CosineAnnealingLR(  # noqa: E731
        torch.optim.AdamW(net().parameters(), lr=0.01, weight_decay=0.05), T_max=3)
    settings = dict(nodes=4, k=2, log_every=4, seed=2, optimizer=torch.optim.AdamW)
    full = mt.teleportation(problem(), rounds=24, lr=sched(), **settings)
    mt.teleportation(problem(), rounds=12, lr=sched(), out=tmp_path / "run", checkpoint_every=5,
                     **settings)
    found = checkpoint.locate(tmp_path / "run", "teleportation")
    arrays = checkpoint.load_matrix(*found)
    assert arrays["v"].shape == (2, 2 * problem().dim)  # both moments of each token
    assert found[1]["config"]["optimizer"].startswith("AdamW(betas=(0.9, 0.999)")
    resumed = mt.teleportation(problem(), rounds=24, lr=sched(), out=tmp_path / "run",
                               resume=tmp_path / "run", **settings)
    assert without_time(resumed.records) == without_time(full.records)
    assert np.array_equal(resumed.x, full.x)
    with pytest.raises(UsageError, match="optimizer"):  # another optimizer: refused
        mt.teleportation(problem(), rounds=24, lr=sched(), out=tmp_path / "run",
                         resume=tmp_path / "run", **{**settings, "optimizer": torch.optim.Adam})


def test_adamw_leaves_normalisation_buffers_to_the_forward_pass():
    p = problem(bn_net)
    result = mt.teleportation(p, nodes=4, k=2, rounds=6, log_every=3,
                              optimizer=functools.partial(torch.optim.AdamW, lr=0.01, weight_decay=0.5))
    assert result.records[-1]["loss"] < 10 and p.n_buffers > 0


def test_the_command_line_does_not_resume_a_run_of_an_optimizer_it_cannot_give(tmp_path, capsys):
    """(--optimizer gives SGD, Adam and AdamW, and resumes their runs:
    tests/test_settings_table.py; another optimizer's run resumes through the API.)"""
    from mpi_teleport.problems.quadratic import Quadratic
    from mpi_teleport.sim import main as sim_main

    mt.teleportation(Quadratic(n=4, d=3, seed=0), nodes=4, k=2, rounds=6, seed=0,
                     optimizer=functools.partial(torch.optim.Adadelta, lr=0.01),
                     out=tmp_path / "run", checkpoint_every=3)
    capsys.readouterr()
    assert sim_main(["--resume", str(tmp_path / "run"), "--rounds", "9"]) == 2
    err = capsys.readouterr().err
    assert "its optimizer is Adadelta" in err and len(err.strip().splitlines()) == 1


def test_a_long_vector_is_stepped_in_blocks_with_the_same_bits(monkeypatch):
    from mpi_teleport.core import optimizers

    gen = np.random.default_rng(1)
    x, g = gen.standard_normal((2, 3, 40)).astype(np.float32)
    rule = Adam(weight_decay=0.1, decoupled=True, trainable=29)
    outs = []
    for block in (40, 7):  # one pass; blocks of 7 (the trainable edge inside a block)
        monkeypatch.setattr(optimizers, "BLOCK", block)
        v = np.zeros((3, 80), np.float32)
        v[:, :40] = 0.5
        out = g.copy()
        adam_step(rule, out, x, v, 0.01, 3)
        outs.append((out, v))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])


# ---------------------------------------------------------------- any torch optimizer (issue 47)
class GlobalState(torch.optim.SGD):
    def step(self, closure=None):
        self.state["calls"] = self.state.get("calls", 0) + 1
        return super().step(closure)


class GradScalar(Lion):
    def step(self, closure=None):
        super().step(closure)
        for p in self.param_groups[0]["params"]:
            self.state[p]["norm"] = float(p.grad.norm())


ANY = [torch.optim.Adadelta,
       functools.partial(torch.optim.RMSprop, lr=0.01, momentum=0.5, centered=True),
       functools.partial(torch.optim.Adagrad, lr=0.05, initial_accumulator_value=0.1),
       functools.partial(torch.optim.NAdam, lr=0.01), functools.partial(torch.optim.Rprop, lr=0.01),
       functools.partial(torch.optim.Adam, lr=0.01, amsgrad=True),
       functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9, dampening=0.1),
       functools.partial(Lion, lr=0.01, weight_decay=0.1)]


def _name(o):
    return getattr(o, "func", o).__name__


@pytest.mark.parametrize("optimizer", ANY, ids=_name)
def test_any_optimizer_on_one_node_trains_as_a_plain_loop(optimizer):
    """Its step is torch's own, per parameter (shapes as the model's), state and step
    count kept between rounds: one node equals the plain loop bit for bit."""
    p = problem(nodes=1)
    result = mt.dsgd(p, nodes=1, rounds=12, log_every=12, optimizer=optimizer)
    model = net()
    model.load_state_dict(p.module(p.initial()).state_dict())
    opt = optimizer(model.parameters())
    x, y = blobs()
    for t in range(12):
        idx = p.batch(0, t)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x[idx])),
                                          torch.from_numpy(y[idx])).backward()
        opt.step()
    want = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
    np.testing.assert_array_equal(result.x, want)


@pytest.mark.parametrize("optimizer,words", [
    (torch.optim.Adafactor, "its state 'row_var' is a tensor of shape (8, 1), neither a tensor "
                            "shaped like its parameter (8, 5)"),
    (GlobalState, "optimizer=GlobalState: it keeps state that is not per parameter ('calls')"),
    (GradScalar, "optimizer=GradScalar: its scalar state 'norm' depends on the gradients"),
])
def test_state_a_token_cannot_carry_is_one_line(optimizer, words):
    with pytest.raises(UsageError) as info:
        mt.teleportation(problem(), nodes=4, k=2, rounds=2, optimizer=optimizer)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_stepped_instance_is_refused_and_the_users_optimizer_is_never_touched():
    model = net()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.1)
    before = [q.detach().clone() for q in model.parameters()]
    mt.teleportation(problem(), nodes=4, k=2, rounds=3, optimizer=opt)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(float(s["step"]) == 0 for s in opt.state.values())
    model(torch.zeros(2, F)).sum().backward()
    opt.step()
    with pytest.raises(UsageError, match="it was stepped already"):
        mt.teleportation(problem(), nodes=4, k=2, rounds=3, optimizer=opt)


@pytest.mark.parametrize("algorithm,optimizer", [
    ("teleportation", torch.optim.Adadelta), ("dsgd", functools.partial(Lion, lr=0.01)),
    ("teleportation", functools.partial(torch.optim.RMSprop, lr=0.01))], ids=["adadelta", "lion", "rmsprop"])
def test_any_optimizers_state_is_checkpointed_and_a_resume_is_bit_for_bit(tmp_path, algorithm,
                                                                        optimizer):
    run = getattr(mt, algorithm)
    settings = dict(nodes=4, log_every=4, seed=2, optimizer=optimizer,
                    **({"k": 2} if algorithm == "teleportation" else {}))
    full = run(problem(bn_net), rounds=16, **settings)
    run(problem(bn_net), rounds=8, out=tmp_path / "run", checkpoint_every=5, **settings)
    found = checkpoint.locate(tmp_path / "run", algorithm)
    rule = from_torch(optimizer, problem(bn_net).n_params)["rule"]
    tokens = 2 if algorithm == "teleportation" else 4
    assert checkpoint.load_matrix(*found)["v"].shape == (tokens, rule.slots * problem(bn_net).dim)
    assert found[1]["config"]["optimizer"] == rule.describe()
    resumed = run(problem(bn_net), rounds=16, out=tmp_path / "run", resume=tmp_path / "run",
                  **settings)
    assert without_time(resumed.records) == without_time(full.records)
    assert np.array_equal(resumed.x, full.x)


@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_any_optimizer_runs_under_the_latency_layer_its_state_one_message(variant):
    """The virtual clock sends a token's state as one message of all its vectors: with a
    bandwidth term, Adadelta's two cost more than RMSprop's one; the numbers are the
    same as without the layer."""
    times = {}
    for opt in (torch.optim.RMSprop, torch.optim.Adadelta):
        timed = mt.teleportation(problem(), nodes=4, k=2, rounds=6, log_every=3, optimizer=opt,
                                 latency="const:5,bw:1", clock="virtual", compute_time=10,
                                 variant=variant)
        plain = mt.teleportation(problem(), nodes=4, k=2, rounds=6, log_every=3,
                                 optimizer=opt, variant=variant)
        assert np.array_equal(timed.x, plain.x)
        times[opt.__name__] = timed.records[-1]["virtual_time_s"]
    assert times["Adadelta"] > times["RMSprop"] > 0


def test_any_optimizer_runs_in_elastic_mode():
    """A restored token's state starts at zero, as momentum does (simulator; under MPI:
    tests/test_optimizers_elastic_mpi.py)."""
    run = mt.teleportation(problem(), nodes=4, k=2, rounds=12, log_every=4, elastic=True,
                           optimizer=torch.optim.Adadelta, fail="1@5")
    assert [x["node"] for x in run.summary["lost"]] == [1] and np.isfinite(run.records[-1]["loss"])
