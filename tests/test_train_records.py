"""Issue 30, the records a PyTorch user reads: the training loss in every record from the
gradients already computed (no extra forward pass), evaluation only when asked
(``eval_every``), on a fixed test subsample if wanted, and a progress bar that moves
every round. Under MPI: tests/in_rank/test_torch_feel_mpi.py."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpi_teleport as mt  # noqa: E402
from mpi_teleport.runtime import progress as progress_mod
from mpi_teleport.core import schedule  # noqa: E402
from mpi_teleport.errors import UsageError  # noqa: E402
from helpers import without_time  # noqa: E402

pytestmark = pytest.mark.torch
F, C = 5, 3


def blobs(n=80, seed=0):
    gen = np.random.default_rng(seed)
    y = gen.integers(0, C, n)
    return (gen.standard_normal((n, F)) + y[:, None]).astype(np.float32), y


class Counted(torch.nn.Module):
    """An MLP counting its forward passes in train and in eval mode."""

    calls = {"train": 0, "eval": 0}

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.ReLU(), torch.nn.Linear(8, C))

    def forward(self, x):
        Counted.calls["train" if self.training else "eval"] += 1
        return self.net(x)


def problem(**kw):
    return mt.TorchProblem(Counted, blobs(), nodes=6, seed=3, test=blobs(40, 1), batch_size=4,
                           eval_batch_size=10, **kw)


def test_every_record_after_round_0_carries_the_previous_rounds_batch_loss():
    p = problem()
    result = mt.teleportation(p, nodes=6, k=3, rounds=9, lr=0.1, log_every=3, seed=2)
    first, *rest = result.records
    assert "train_loss" not in first  # round 0: nothing trained yet
    for record in rest:
        assert {"train_loss", "train_accuracy", "loss", "accuracy"} <= set(record)
    # the mean over round r - 1's holders of what their gradients computed
    last = result.records[-1]
    holders = schedule.holders(2, 6, 3, last["round"] - 1)
    seen = p.training_metrics(last["round"] - 1)
    assert sorted(seen) == sorted(holders.tolist())
    assert last["train_loss"] == pytest.approx(np.mean([seen[h]["train_loss"] for h in holders]),
                                               rel=1e-12)


def test_the_training_loss_costs_no_forward_pass_and_eval_every_evaluates_only_when_asked():
    Counted.calls.update(train=0, eval=0)
    p = problem()
    Counted.calls.update(train=0, eval=0)  # (construction checks a first batch)
    result = mt.teleportation(p, nodes=6, k=3, rounds=12, lr=0.1, log_every=2, eval_every=5)
    assert Counted.calls["train"] == 12 * 3 + 3  # one per row and round (+ the start's probe of round 0's holders)
    evaluated = [r["round"] for r in result.records if "loss" in r]
    assert evaluated == [0, 5, 10, 12]  # first, every 5th, last
    # round 1: the first batches' training loss, not evaluated (eval_every)
    assert [r["round"] for r in result.records] == [0, 1, 2, 4, 5, 6, 8, 10, 12]
    assert all("train_loss" in r for r in result.records[1:])
    chunks = 40 // 10
    assert Counted.calls["eval"] == len(evaluated) * chunks
    assert result.summary["final_accuracy"] == result.records[-1]["accuracy"]
    # without eval_every every record evaluates, as before; the training values are the same
    every = mt.teleportation(problem(), nodes=6, k=3, rounds=12, lr=0.1, log_every=2)
    assert all("loss" in r for r in every.records)
    by_round = {r["round"]: r for r in every.records}
    for r in result.records[1:]:
        assert r["train_loss"] == by_round.get(r["round"], r)["train_loss"]


def test_eval_every_in_epochs_and_its_refusals():
    p = problem()  # 80 samples, batch 4: 20 batches an epoch; DSGD draws 6 a round
    result = mt.dsgd(p, nodes=6, rounds=10, lr=0.1, log_every=1, eval_every_epochs=1)
    # (evaluated exactly where epochs end: 24 samples a round, 80 an epoch; issue 57)
    assert [r["round"] for r in result.records if "loss" in r] == [0, 4, 7, 10]
    with pytest.raises(UsageError, match="not both"):
        mt.dsgd(p, nodes=6, rounds=4, lr=0.1, eval_every=2, eval_every_epochs=1)
    with pytest.raises(UsageError, match="eval_every must be at least 1"):
        mt.dsgd(p, nodes=6, rounds=4, lr=0.1, eval_every=0)
    with pytest.raises(UsageError, match="eval_every"):
        mt.search_k(p, nodes=6, rounds=4, lr=0.1, records=mt.Records(eval_every=2))


def test_eval_every_and_the_training_loss_survive_a_resume_bit_for_bit(tmp_path):
    settings = dict(nodes=6, k=3, lr=0.1, momentum=0.5, log_every=2, eval_every=5, seed=4)
    full = mt.teleportation(problem(), rounds=14, **settings)
    # interrupted at round 10 (a logging and evaluation round: its record is the same)
    mt.teleportation(problem(), rounds=10, out=tmp_path / "run", checkpoint_every=3, **settings)
    resumed = mt.teleportation(problem(), rounds=14, out=tmp_path / "run",
                               resume=tmp_path / "run", **settings)
    assert without_time(resumed.records) == without_time(full.records)
    assert np.array_equal(resumed.x, full.x)


def test_a_fixed_test_subsample_is_evaluated():
    whole = problem()
    part = problem(test_samples=15)
    assert part.n_test == 15 and whole.n_test == 40
    again = problem(test_samples=15)
    x = part.initial()[None]
    assert part.evaluate(x) == again.evaluate(x)  # fixed: the same samples every time
    with pytest.raises(ValueError, match="test_samples"):
        problem(test_samples=0)


def test_the_progress_bar_moves_every_round_with_the_training_loss(monkeypatch, capsys):
    clock = iter(range(10_000))  # a second passes between updates: none is held back
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(progress_mod, "is_terminal", lambda stream: True)  # (drawn in place)
    mt.teleportation(problem(), nodes=6, k=3, rounds=8, lr=0.1, log_every=4, progress=True)
    lines = capsys.readouterr().err.split("\r")
    for r in range(1, 9):
        assert any(f"round {r}/8" in line and "train loss" in line for line in lines), r
    assert any("train loss" in line and "| accuracy" in line for line in lines)


def test_eval_every_in_elastic_mode():
    from mpi_teleport.problems.quadratic import Quadratic

    result = mt.teleportation(Quadratic(n=6, d=3), nodes=6, k=2, rounds=12, lr=0.05,
                              log_every=2, eval_every=5, fail=["2@3"])
    assert [r["round"] for r in result.records if "error" in r] == [0, 5, 10, 12]
    assert [r["round"] for r in result.records] == [0, 2, 4, 5, 6, 8, 10, 12]


def test_eval_every_as_a_records_option():
    flat = mt.dsgd(problem(), nodes=6, rounds=10, lr=0.1, log_every=2, eval_every=5)
    grouped = mt.dsgd(problem(), nodes=6, rounds=10, lr=0.1,
                      records=mt.Records(log_every=2, eval_every=5))
    assert without_time(grouped.records) == without_time(flat.records)
    with pytest.raises(UsageError, match="set the same setting"):
        mt.dsgd(problem(), nodes=6, rounds=10, lr=0.1, eval_every=5,
                records=mt.Records(eval_every=5))


def test_round_1_is_recorded_with_the_first_batches_loss_and_evaluated_as_round_0():
    """Issue 47: a plain loop prints batch 0's loss; the records carried the first training
    loss only at round log_every. Round 1's record carries round 0's batches and is
    evaluated as round 0's record is, so a script reading ``loss`` on every record still
    finds it by default."""
    p = problem()
    result = mt.teleportation(p, nodes=6, k=3, rounds=9, lr=0.1, log_every=4, seed=2)
    assert [r["round"] for r in result.records] == [0, 1, 4, 8, 9]
    one = result.records[1]
    assert {"loss", "accuracy", "consensus", "train_loss", "train_accuracy", "epoch",
            "samples", "lr"} <= set(one)
    seen = [v["train_loss"] for v in mt.teleportation(problem(), nodes=6, k=3, rounds=1, lr=0.1,
                                                      seed=2).records[1:]]
    assert seen == [one["train_loss"]]  # (round 1 is also the last of a 1-round run)
    # with eval_every, or with the start's evaluation skipped: the training values alone
    sparse = mt.teleportation(problem(), nodes=6, k=3, rounds=9, lr=0.1, log_every=4, seed=2,
                              eval_every=8)
    assert [(r["round"], "loss" in r) for r in sparse.records] == [
        (0, True), (1, False), (4, False), (8, True), (9, True)]
    late = mt.teleportation(problem(), nodes=6, k=3, rounds=9, lr=0.1, log_every=4, seed=2,
                            eval_at_start=False)
    assert [(r["round"], "loss" in r) for r in late.records] == [
        (0, False), (1, False), (4, True), (8, True), (9, True)]
    for other in (sparse, late):  # the same training, whatever is evaluated
        assert [r["train_loss"] for r in other.records[1:]] == [r["train_loss"] for r in result.records[1:]]
    # log_every=1 records round 1 once
    assert [r["round"] for r in mt.dsgd(problem(), nodes=6, rounds=3, lr=0.1, log_every=1).records] \
        == [0, 1, 2, 3]


def test_round_1_survives_resumes_on_either_side_of_it(tmp_path):
    settings = dict(nodes=6, k=3, lr=0.1, momentum=0.5, log_every=4, seed=4)
    full = mt.teleportation(problem(), rounds=9, **settings)
    for stop in (1, 4):  # a resume from round 1 (its record restored) and from after it
        run = tmp_path / f"run{stop}"
        mt.teleportation(problem(), rounds=stop, out=run, checkpoint_every=1, **settings)
        resumed = mt.teleportation(problem(), rounds=9, out=run, resume=run, **settings)
        assert without_time(resumed.records) == without_time(full.records), stop
        assert np.array_equal(resumed.x, full.x)


def test_problems_without_batches_search_and_elastic_runs_keep_their_records():
    """Round 1 is recorded only where a record carries training values: not for a problem
    that reports no batches (the numpy problems: their records, and test_compatibility's
    files, are as before), not for the search or elastic runs (no training values)."""
    from mpi_teleport.problems.quadratic import Quadratic

    plain = mt.teleportation(Quadratic(n=6, d=3), nodes=6, k=2, rounds=8, lr=0.05, log_every=4)
    assert [r["round"] for r in plain.records] == [0, 4, 8]
    elastic = mt.teleportation(problem(), nodes=6, k=2, rounds=8, lr=0.05, log_every=4,
                               fail=["2@3"])
    assert [r["round"] for r in elastic.records] == [0, 4, 8]
    search = mt.search_k(problem(validation_fraction=0.2), nodes=6, rounds=4, lr=0.05,
                         log_every=2)
    assert 1 not in [r["round"] for r in search.records]
