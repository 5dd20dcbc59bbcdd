"""Issue 30: PyTorch learning-rate schedulers as a plain script builds them, stepped per
epoch or per round, as a pure function of the round (mpi_teleport/core/schedulers.py)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpi_teleport as mt  # noqa: E402
from mpi_teleport.errors import UsageError  # noqa: E402
from mpi_teleport.core.schedulers import scheduled_lr  # noqa: E402
from helpers import without_time  # noqa: E402

pytestmark = pytest.mark.torch
F, C = 5, 3
S = torch.optim.lr_scheduler


def blobs(n=96, seed=0):
    gen = np.random.default_rng(seed)
    y = gen.integers(0, C, n)
    return (gen.standard_normal((n, F)) + y[:, None]).astype(np.float32), y


def net():
    return torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.ReLU(), torch.nn.Linear(8, C))


def problem():  # 96 samples, batch 4: with k = 2 an epoch is 12 rounds
    return mt.TorchProblem(net, blobs(), nodes=4, seed=1, test=blobs(24, 1), batch_size=4)


def optimizer(lr=0.1):
    return torch.optim.SGD(net().parameters(), lr=lr)


def plain_script_lrs(scheduler, steps):
    """What a plain loop trains with at step 0, 1, ...: the lr, then scheduler.step()."""
    out = []
    for _ in range(steps):
        out.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.step()
    return out


BUILDERS = {
    "StepLR": lambda o: S.StepLR(o, step_size=2, gamma=0.5),
    "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, T_max=5, eta_min=0.001),
    "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=0.3, total_steps=40),
    "warm-up + cosine": lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.1, total_iters=2), S.CosineAnnealingLR(o, T_max=4)],
        milestones=[2]),
}


@pytest.mark.parametrize("name", BUILDERS)
@pytest.mark.parametrize("lr_step", ["epoch", "round"])
def test_the_step_size_is_the_plain_loops_learning_rate(name, lr_step):
    import warnings

    p = problem()
    user = BUILDERS[name](optimizer())
    lr = scheduled_lr(user, lr_step, p, active=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = plain_script_lrs(BUILDERS[name](optimizer()), 40)
    rounds = range(40)
    got = [lr(t) for t in reversed(rounds)][::-1]  # asked in any order: the same values
    step = [t // 12 for t in rounds] if lr_step == "epoch" else list(rounds)
    assert got == [want[s] for s in step]
    assert user.last_epoch == 0 and user.optimizer.param_groups[0]["lr"] == want[0]  # untouched


def test_a_scheduler_trains_as_the_same_schedule_written_by_hand():
    settings = dict(nodes=4, k=2, rounds=30, log_every=5, momentum=0.5, seed=3)
    scheduled = mt.teleportation(problem(), lr=S.StepLR(optimizer(), step_size=1, gamma=0.5),
                                 **settings)
    by_hand = mt.teleportation(problem(), lr=lambda t: 0.1 * 0.5 ** (t * 8 // 96), **settings)
    assert without_time(scheduled.records) == without_time(by_hand.records)
    per_round = mt.teleportation(problem(), lr=S.StepLR(optimizer(), step_size=12, gamma=0.5),
                                 lr_step="round", **settings)
    assert without_time(per_round.records) == without_time(scheduled.records)


def test_rounds_per_epoch_for_a_run():
    p = problem()
    assert mt.rounds_per_epoch(p, active=2) == 12.0  # Teleportation, k = 2
    assert mt.rounds_per_epoch(p, active=4) == 6.0  # DSGD, n = 4
    result = mt.dsgd(p, nodes=4, epochs=2, lr=0.1, log_every=100)
    assert result.summary["rounds_run"] == 2 * mt.rounds_per_epoch(p, active=4)


def test_schedulers_refused_in_one_line():
    stepped = S.StepLR(optimizer(), step_size=1)
    stepped.optimizer.step()
    stepped.step()
    with pytest.raises(UsageError, match="stepped already"):
        mt.dsgd(problem(), nodes=4, rounds=3, lr=stepped)
    with pytest.raises(UsageError, match="lr_step must be 'epoch' or 'round'"):
        mt.dsgd(problem(), nodes=4, rounds=3, lr=S.StepLR(optimizer(), 1), lr_step="batch")
    from mpi_teleport.problems.quadratic import Quadratic

    with pytest.raises(UsageError, match="n_train and batch_size"):
        mt.dsgd(Quadratic(n=4, d=3), nodes=4, rounds=3, lr=S.StepLR(optimizer(), 1))
    # per round it needs no epochs
    assert mt.dsgd(Quadratic(n=4, d=3), nodes=4, rounds=3, lr_step="round",
                   lr=S.StepLR(optimizer(0.01), 1)).summary["rounds_run"] == 3


# ---------------------------------------------------------------- issue 47, issue 50 class 2
@pytest.mark.parametrize("factory", [
    __import__("functools").partial(S.StepLR, step_size=1, gamma=0.7),
    lambda optimizer: S.StepLR(optimizer, step_size=1, gamma=0.7)], ids=["partial", "function"])
def test_a_scheduler_is_given_without_a_throwaway_model(factory):
    """Built on a private copy of optimizer= (its lr is the base), it trains as the same
    scheduler built on a throwaway model's optimizer does."""
    built = S.StepLR(torch.optim.Adadelta(net().parameters()), step_size=1, gamma=0.7)
    a = mt.teleportation(problem(), nodes=4, k=2, rounds=30, log_every=10,
                         optimizer=torch.optim.Adadelta, lr=factory)
    b = mt.teleportation(problem(), nodes=4, k=2, rounds=30, log_every=10,
                         optimizer=torch.optim.Adadelta, lr=built)
    assert without_time(a.records) == without_time(b.records)
    with pytest.raises(UsageError, match="needs optimizer="):
        mt.teleportation(problem(), nodes=4, k=2, rounds=3, lr=factory)


BAD_SCHEDULERS = [  # (scheduler on an optimizer, rounds, lr_step, the one line's words)
    (lambda o: S.ReduceLROnPlateau(o), 6, "epoch",
     "lr=ReduceLROnPlateau cannot be replayed: its step() needs the validation metric"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=5), 20, "round",
     "lr=OneCycleLR: its step() failed at round 6: ValueError: Tried to step 6 times"),
    (lambda o: S.LambdaLR(o, lambda e: [1.0, 0.5][e]), 40, "epoch",
     "lr=LambdaLR: its step() failed at round {epoch2}: IndexError"),
]


@pytest.mark.parametrize("make,rounds,lr_step,words", BAD_SCHEDULERS,
                         ids=["plateau", "one-cycle", "lambda"])
@pytest.mark.parametrize("algorithm", ["teleportation", "dsgd"])
def test_a_scheduler_that_cannot_be_replayed_is_one_line(algorithm, make, rounds, lr_step, words):
    """Refused at the start (it cannot be replayed) or at the round it fails, in one
    UsageError naming the scheduler: never torch's traceback."""
    extra = {"k": 2} if algorithm == "teleportation" else {}
    words = words.format(epoch2=24 if extra else 12)  # (96 samples, batch 4, 2 or 4 active)
    with pytest.raises(UsageError) as info:
        getattr(mt, algorithm)(problem(), nodes=4, rounds=rounds, lr=make(optimizer()),
                               lr_step=lr_step, log_every=5, **extra)
    assert words in str(info.value) and "\n" not in str(info.value)
