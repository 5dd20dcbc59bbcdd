"""The authors' Fashion-MNIST recipe (issue #46, :mod:`mpi_teleport.problems.authors_recipe`):
the balanced Dirichlet partition against a hand-computed case, the GroupNorm LeNet's size,
random crops keyed by (seed, node, round), the node-mean evaluation against a direct
computation, the cosine schedule with warm-up against hand-computed values, the choices
through the API and the command line; on tiny generated files in the real on-disk format,
and on the real files where installed (under MPI: tests/in_rank/test_command_line_mpi.py)."""
from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mpi_teleport import sim
from mpi_teleport.problems import authors_recipe as ar
from mpi_teleport.problems import partitions
from helpers import real_fashion_mnist, write_fashion_mnist

HAVE_REAL, NO_REAL = real_fashion_mnist()
NEEDS_REAL = pytest.mark.skipif(not HAVE_REAL, reason=NO_REAL)


@pytest.fixture
def tiny(tmp_path) -> Path:
    """The four files, decompressed, flat: 60 training and 40 test images."""
    folder = tmp_path / "fashion"
    write_fashion_mnist(folder, 60, 40, seed=3, gz=(), labels={
        "train": np.arange(60, dtype=np.uint8) % 10, "t10k": np.arange(40, dtype=np.uint8) % 10})
    return folder


# ------------------------------------------------------------------------ partition
class _Scripted:
    """A stand-in for numpy's RandomState: no shuffle, Dirichlet draws from a script."""

    draws: list = []

    def __init__(self, seed):
        pass

    def shuffle(self, a):
        pass

    def dirichlet(self, alpha):
        return np.array(self.draws.pop(0))


def test_the_balanced_partition_matches_a_hand_computed_case(monkeypatch):
    """4 nodes in groups of 2, 16 samples (block A: 0-7, block B: 8-15), classes 0/1.
    Block A: class 0 (6) at 0.8/0.2 -> 4 | 2; class 1 (2) at 0.9/0.1, but node 0 already
    holds the mean share 4, so balancing gives it 0 -> 0 | 2. Block B: 0.1/0.9 and
    0.2/0.8 leave node 2 with 1 < int(0.5 * 8 / 2) = 2 samples: redrawn; 0.5/0.5 -> 1 | 1,
    0.4/0.6 of 6 -> 2 | 4. Lists [0-3], [4-7], [8, 10, 11], [9, 12-15], concatenated and cut
    into four shares of 4: the third share straddles nodes 2 and 3."""
    labels = np.array([0] * 6 + [1] * 2 + [0] * 2 + [1] * 6)
    _Scripted.draws = [[0.8, 0.2], [0.9, 0.1], [0.1, 0.9], [0.2, 0.8], [0.5, 0.5], [0.4, 0.6]]
    monkeypatch.setattr(partitions.np.random, "RandomState", _Scripted)
    parts = partitions.balanced_dirichlet_partition(labels, 4, 0.5, seed=0, group_size=2)
    assert _Scripted.draws == []
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11],
                                           [12, 13, 14, 15]]
    assert partitions.class_histogram(labels, parts, 2) == [[4, 0], [2, 2], [2, 2], [0, 4]]


def test_the_balanced_partition_is_seeded_equal_shares_and_a_partition():
    labels = np.arange(1000) % 10
    a = partitions.balanced_dirichlet_partition(labels, 25, 0.1, seed=4)
    b = partitions.balanced_dirichlet_partition(labels, 25, 0.1, seed=4)
    c = partitions.balanced_dirichlet_partition(labels, 25, 0.1, seed=5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert [len(p) for p in a] == [40] * 25
    assert np.array_equal(np.sort(np.concatenate(a)), np.arange(1000))


@NEEDS_REAL
def test_the_balanced_partition_of_the_real_set_gives_every_node_2400_samples():
    from mpi_teleport.problems.datasets import open_fashion_mnist

    _, y = open_fashion_mnist(None, True)
    parts = partitions.balanced_dirichlet_partition(y, 25, 0.1, seed=0)
    assert [len(p) for p in parts] == [2400] * 25
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(60000))


# ---------------------------------------------------------------------------- model
def test_the_groupnorm_lenet_has_the_authors_layers_and_44470_parameters():
    torch = pytest.importorskip("torch")
    from mpi_teleport.problems import models

    m = models.build_model("lenet-gn", 0)
    assert sum(p.numel() for p in m.parameters()) == 44470  # 156+12+2416+32+30840+10164+850
    assert [(g.num_groups, g.num_channels) for g in (m.gn1, m.gn2)] == [(2, 6), (4, 16)]
    assert m(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    assert not list(m.buffers())  # (a token is exactly the parameters)


# ----------------------------------------------------------------------------- crop
def test_a_crop_is_a_window_of_the_zero_padded_image():
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F

    x = torch.arange(2 * 28 * 28, dtype=torch.float32).reshape(2, 1, 28, 28) + 1
    out = ar.random_crop(x, torch.Generator().manual_seed(1))
    padded = F.pad(x, (4, 4, 4, 4))
    for i in range(2):
        windows = [(a, b) for a in range(9) for b in range(9)
                   if torch.equal(out[i], padded[i, :, a:a + 28, b:b + 28])]
        assert len(windows) == 1


def test_the_crops_are_keyed_by_seed_node_and_round():
    torch = pytest.importorskip("torch")
    from mpi_teleport.problems.keyed_random import augment_generator

    x = torch.rand(32, 1, 28, 28, generator=torch.Generator().manual_seed(0))

    def crop(seed, node, t):
        return ar.random_crop(x, augment_generator(torch.Generator(), seed, node, t))

    assert torch.equal(crop(0, 3, 7), crop(0, 3, 7))
    for other in (crop(0, 4, 7), crop(0, 3, 8), crop(1, 3, 7)):
        assert not torch.equal(crop(0, 3, 7), other)


def test_the_problem_crops_training_batches_as_keyed_and_leaves_test_images(tiny):
    pytest.importorskip("torch")
    from mpi_teleport.problems import network

    p = network.fashion_mnist(5, 0, data_dir=tiny, recipe=("crop",), alpha=1.0,
                              val_fraction=0, batch_size=4)
    q = network.fashion_mnist(5, 0, data_dir=tiny, recipe=("crop",), alpha=1.0,
                              val_fraction=0, batch_size=4)
    x = np.stack([p.initial()] * 2)
    g = p.gradient([1, 2], x, t=3)
    assert np.array_equal(g, q.gradient([1, 2], x, t=3))  # another process, the same crops
    assert np.array_equal(g, p.gradient([1, 2], x, t=3))
    assert not np.array_equal(g, p.gradient([1, 2], x, t=4))
    images = p._sets["test"].x[0:40]  # scaled to [0, 1], not normalised
    assert images.min() >= 0.0 and images.max() <= 1.0 and images.max() > 0.9


# ----------------------------------------------------------------------- evaluation
def test_node_mean_evaluation_equals_a_direct_computation(tiny):
    pytest.importorskip("torch")
    from mpi_teleport.problems import models, network
    from mpi_teleport.problems.datasets import open_fashion_mnist

    p = network.fashion_mnist(5, 0, data_dir=tiny, recipe="authors", alpha=1.0,
                              val_fraction=0, batch_size=4)
    g = np.random.default_rng(0)
    x = np.stack([p.initial() + np.float32(0.3) * g.standard_normal(p.dim).astype(np.float32)
                  for _ in range(3)])
    m = p.evaluate(x)
    images, labels = open_fashion_mnist(tiny, False)
    test_x = images[0:40] * np.float32(0.3530) + np.float32(0.2860)  # the unnormalised images
    direct = [models.evaluate(p.module(row), test_x, labels) for row in x]
    accuracy = [d["accuracy"] for d in direct]
    assert m["node_mean_accuracy"] == pytest.approx(math.fsum(accuracy) / 3, abs=1e-12)
    assert m["node_min_accuracy"] == min(accuracy) and m["node_max_accuracy"] == max(accuracy)
    assert m["node_mean_loss"] == pytest.approx(np.mean([d["loss"] for d in direct]), rel=1e-5)
    averaged = models.evaluate(p.module(p.average(x)), test_x, labels)
    assert m["accuracy"] == averaged["accuracy"]  # (beside: the averaged model's)
    assert p.describe()["recipe"]["choices"] == list(ar.CHOICES)


# ------------------------------------------------------------------------- schedule
def test_the_cosine_schedule_with_warmup_matches_hand_computed_values():
    lr = ar.cosine_with_warmup(0.1, epochs=50, rounds_per_epoch=75)
    assert lr(0) == 5e-5 and lr(74) == 5e-5  # epoch 0: timm's warmup_lr_init
    assert lr(75 * 5) == pytest.approx(5e-5 + 5 * (0.1 - 5e-5) / 10)
    assert lr(75 * 10) == pytest.approx(0.1)  # warm-up over: the cosine starts at lr
    assert lr(75 * 35) == pytest.approx(1e-4 + 0.5 * (0.1 - 1e-4))  # half way down
    assert lr(75 * 60) == pytest.approx(1e-4) and lr(75 * 100) == pytest.approx(1e-4)


# ------------------------------------------------------------------ API, command line
def test_choices_are_checked_and_named_factories_resolve():
    assert ar.check_choices("authors") == ar.CHOICES and ar.check_choices("paper") == ()
    assert ar.check_choices(["crop", "partition"]) == ("partition", "crop")
    with pytest.raises(ValueError, match="unknown recipe choice"):
        ar.check_choices(["crops"])
    assert callable(ar.with_partition_crop) and callable(ar.with_evaluation)
    with pytest.raises(AttributeError):
        ar.with_partition_bogus  # noqa: B018
    assert ar.authors_flags(()) == "fashion-mnist"
    assert ar.authors_flags(ar.CHOICES).endswith(":authors")
    assert ar.authors_flags(("model", "evaluation")).endswith(":with_model_evaluation")


def test_the_command_line_trains_with_the_authors_recipe(tiny, tmp_path):
    pytest.importorskip("torch")
    flags = ["--nodes", "5", "--problem", "mpi_teleport.problems.authors_recipe:authors",
             "--algorithm", "dsgd", "--rounds", "2", "--lr", "0.01", "--alpha", "1",
             "--batch-size", "4", "--sampling", "epochs", "--val-fraction", "0",
             "--data-dir", str(tiny), "--log-every", "1", "--progress", "off"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert sim.main([*flags, "--out", str(tmp_path / "run")]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2]
    assert all(0 <= r["node_mean_accuracy"] <= 1 for r in records)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert "lenet" in json.dumps(config).lower() or "recipe" in json.dumps(config)


def test_an_unknown_choice_on_the_command_line_is_one_line(capsys):
    code = sim.main(["--nodes", "4", "--problem", "mpi_teleport.problems.authors_recipe:with_crops",
                     "--rounds", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "with_crops" in err[0]


# The authors' recipe on the real data under MPI, equal to the simulator:
# tests/in_rank/test_command_line_mpi.py.


def test_the_figure3_script_runs_the_schedule_beside_the_constant_runs(monkeypatch):
    """--lr-schedule cosine-warmup: the final runs carry the schedule and go under their
    own folder; the selection runs stay constant and shared, so both columns use the same
    step sizes."""
    import sys

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    sys.modules.pop("figure3_fashion_mnist", None)
    import figure3_fashion_mnist as figure3

    class Args:
        runs, nodes, k, batch_size, eval_epochs, momentum, data_dir = "R", 25, 8, 32, 2.0, 0.9, None
        choices, lr_schedule = ("partition", "model", "crop"), "cosine-warmup"

    final = figure3.run_flags(Args, "teleportation", 10.0, 0.1, 0, 200.0, Args.lr_schedule)
    select = figure3.run_flags(Args, "teleportation", 10.0, 0.1, 0, 10.0)
    assert final[final.index("--lr-schedule") + 1] == "cosine-warmup"
    assert "--lr-schedule" not in select
    assert figure3.run_dir(Args, "final", "dsgd-ring", 10.0, 0.1, 2) == Path(
        "R/final-cosine-warmup/alpha10/dsgd-ring/lr0.1/seed2")
    assert figure3.run_dir(Args, "select", "dsgd-ring", 10.0, 0.1, 0) == Path(
        "R/select/alpha10/dsgd-ring/lr0.1/seed0")
    Args.lr_schedule = "constant"
    assert figure3.run_dir(Args, "final", "dsgd-ring", 10.0, 0.1, 2) == Path(
        "R/final/alpha10/dsgd-ring/lr0.1/seed2")
