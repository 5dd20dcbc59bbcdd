"""Issue 30, the small habits of a PyTorch port: ``module()``'s mode, the default
partition, messages in the API's keyword names, ``device`` as torch knows it, threads."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpi_teleport as mt  # noqa: E402
from mpi_teleport.errors import NonFiniteError, UsageError  # noqa: E402
from mpi_teleport.problems import device as device_mod  # noqa: E402
from mpi_teleport.problems import partitions, torch_options  # noqa: E402
from mpi_teleport.problems.quadratic import Quadratic  # noqa: E402
from mpi_teleport.problems.torch_problem import TorchProblem  # noqa: E402
from mpi_teleport.sim import main as sim_main  # noqa: E402

pytestmark = pytest.mark.torch
F, C = 5, 3


def blobs(n=60, seed=0):
    gen = np.random.default_rng(seed)
    y = gen.integers(0, C, n)
    return (gen.standard_normal((n, F)) + y[:, None]).astype(np.float32), y


def net():
    return torch.nn.Sequential(torch.nn.Linear(F, 6), torch.nn.Dropout(0.5), torch.nn.Linear(6, C))


def small(**kw):
    return TorchProblem(net, blobs(), nodes=3, seed=1, test=blobs(20, 1), batch_size=4, **kw)


# ------------------------------------------------------------------ module()
def test_module_is_in_eval_mode_unless_asked_whatever_the_problem_did_last():
    p = small()
    x = p.initial()
    p.gradient([0], x[None], t=0)  # leaves the problem's own model in train mode
    assert not p.module(x).training
    p.evaluate(x[None])  # leaves it in eval mode
    trained = p.module(x, train=True)
    assert trained.training and all(m.training for m in trained.modules())
    with pytest.raises(TypeError, match="train must be True or False"):
        p.module(x, train="yes")


# ------------------------------------------------------------------ partition
def test_partition_defaults_to_iid_and_alpha_means_dirichlet():
    iid = small()
    assert [len(s) for s in iid.parts] == [20, 20, 20]
    assert all(np.array_equal(a, b) for a, b in zip(iid.parts, small(partition="iid").parts))
    skewed = small(alpha=0.1)
    want = partitions.dirichlet_partition(blobs()[1], 3, 0.1, 1)
    assert all(np.array_equal(a, b) for a, b in zip(skewed.parts, want))
    explicit = small(partition="dirichlet")  # the paper's 0.1 when alpha is not given
    assert all(np.array_equal(a, b) for a, b in zip(explicit.parts, want))
    # an explicit partition wins over alpha (as code written for the old default says)
    assert all(np.array_equal(a, b) for a, b in zip(iid.parts, small(partition="iid", alpha=0.5).parts))


def test_the_command_lines_network_problems_keep_the_papers_dirichlet(monkeypatch):
    from mpi_teleport.problems import network, torch_problem

    seen = {}

    def spy(*args, **kw):
        seen.update(kw)
        raise RuntimeError("spied")

    monkeypatch.setattr(torch_problem, "TorchProblem", spy)
    with pytest.raises(RuntimeError, match="spied"):
        network.digits(4, seed=0)
    assert seen["alpha"] == 0.1 and seen.get("partition") in (None, "dirichlet")


# ------------------------------------------------------------------ messages
def test_non_finite_through_the_api_says_lr_and_names_the_loss():
    with pytest.raises(NonFiniteError) as info:
        mt.dsgd(small(), nodes=3, rounds=20, lr=1e30, log_every=5)
    text = str(info.value)
    assert text.startswith("the loss") and "became non-finite" in text
    assert "lower lr (now 1e+30)" in text
    assert "--lr" not in text and "accuracy" not in text
    with pytest.raises(NonFiniteError, match=r"lower lr \(now") as info:
        mt.teleportation(Quadratic(n=4, d=3, seed=1), nodes=4, k=2, rounds=50, lr=1e6,
                         log_every=5)


def test_elastic_refusals_through_the_api_name_keywords():
    with pytest.raises(UsageError) as info:
        mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=5, lr=0.1, elastic=True,
                         latency="const:5", clock="virtual")
    text = str(info.value)
    assert "elastic mode (elastic, fail)" in text and "drop latency/clock/compute_time" in text
    assert "--" not in text


def test_non_finite_on_the_command_line_says_dash_dash_lr(capfd):
    code = sim_main(["--nodes", "4", "--k", "2", "--rounds", "50", "--lr", "1e6",
                     "--log-every", "5"])
    err = capfd.readouterr().err
    assert code != 0 and "lower --lr (now 1000000.0)" in err and "became non-finite" in err


# ------------------------------------------------------------------ device
def test_device_is_what_torch_accelerator_knows(monkeypatch):
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is visible")
    assert small(device="auto").device.type == "cpu"
    for name in ("mps", "xpu", "cuda"):
        with pytest.raises(UsageError) as info:
            small(device=name)
        text = str(info.value)
        assert "\n" not in text and "no" in text and "device='cpu' or 'auto'" in text
    with pytest.raises(UsageError, match="not a torch device"):
        small(device="abacus")
    # 'auto' looks beyond CUDA: whatever torch.accelerator names, one device per local rank
    monkeypatch.setattr(device_mod, "accelerator", lambda: ("xpu", 2))
    assert device_mod.pick_device("auto", 3) == "xpu:1"
    assert device_mod.pick_device("xpu", 0) == "xpu:0"
    monkeypatch.setattr(device_mod, "accelerator", lambda: ("mps", 1))
    assert device_mod.pick_device("auto", 5) == "mps"
    with pytest.raises(UsageError, match="torch sees no xpu device"):
        device_mod.pick_device("xpu", 0)


def test_dropout_on_an_accelerator_draws_from_its_keyed_generator():
    from types import SimpleNamespace

    from mpi_teleport.problems.torch_problem import device_generators

    fake = SimpleNamespace(xpu=SimpleNamespace(default_generators=["xpu0", "xpu1"],
                                               current_device=lambda: 1),
                           mps=SimpleNamespace(_get_default_mps_generator=lambda: "mps"))
    assert device_generators(fake, torch.device("xpu")) == ["xpu1"]
    assert device_generators(fake, torch.device("xpu:0")) == ["xpu0"]
    assert device_generators(fake, torch.device("mps")) == ["mps"]
    assert device_generators(torch, torch.device("cpu")) == []


# ------------------------------------------------------------------ threads
def test_threads_auto_is_the_hosts_cores_over_the_ranks_there(monkeypatch):
    from mpi_teleport.session.runner import share_cores

    monkeypatch.setattr(torch_options, "host_cores", lambda: 16)
    assert [torch_options.core_share(r) for r in (1, 3, 4, 16, 40)] == [16, 5, 4, 1, 1]
    p = small(threads="auto")
    assert p.torch_settings.threads == 16  # the simulator: every core of the host

    class FourOnThisHost:
        def ranks_on_host(self):
            return 4

    share_cores(p, FourOnThisHost())
    assert p.torch_settings.threads == 4
    fixed = small(threads=2)
    share_cores(fixed, FourOnThisHost())
    assert fixed.torch_settings.threads == 2  # a number given is kept
    with pytest.raises(ValueError, match="'auto' or None"):
        small(threads="many")


def test_threads_auto_is_deterministic_and_puts_torch_back():
    before = torch.get_num_threads()
    a = mt.dsgd(small(threads="auto"), nodes=3, rounds=6, lr=0.1, log_every=3)
    b = mt.dsgd(small(threads="auto"), nodes=3, rounds=6, lr=0.1, log_every=3)
    assert [r["loss"] for r in a.records] == [r["loss"] for r in b.records]
    assert torch.get_num_threads() == before
