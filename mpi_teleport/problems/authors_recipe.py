"""The authors' Fashion-MNIST recipe, choice by choice.

The paper's Figure 3 was made with the authors' own harness (github.com/yukiTakezawa/BaseGraph,
read at commit c89b116903dc3b3fc0670582e6e5fd27ef15e6cb). Its arithmetic of Decentralized
SGD is the project's (heavy-ball momentum, batch 32, shuffled passes), but it makes five
choices the paper's table does not state. Each is written here from its observed
behaviour (none of their code is used) and can be chosen on its own:

``partition``
    :func:`~.partitions.balanced_dirichlet_partition`: Dirichlet in groups of 10 nodes,
    with balancing, then equal shares (2,400 samples per node for 25 nodes)
    (``data/loader_dirichlet.py``). Without it: :func:`~.partitions.dirichlet_partition`.
``model``
    :class:`~.models.LeNetGN`: LeNet with GroupNorm after each pooling
    (``model/lenet_fashion.py``). Without it: :class:`~.models.LeNet5`.
``crop``
    Inputs scaled to [0, 1] without normalisation, and every training image randomly
    cropped back to 28 x 28 from a copy padded by 4 zero pixels (torchvision's
    ``RandomCrop(28, padding=4)``, then ``ToTensor()``: ``load_FMNIST``). The crop's offsets
    are drawn from the generator the problem keys by (seed, node, round)
    (:func:`~.keyed_random.augment_generator`), so the simulator equals MPI and a resumed
    run draws the same crops. Test images: scaled, not cropped. Without it: normalised
    (mean 0.2860, std 0.3530), no augmentation.
``evaluation``
    Besides the averaged model (the project's ``accuracy``, ``loss``), the mean over the
    models held of their test accuracy and loss, each model evaluated on the whole test
    set (``evaluate.py``: each node's ``run_test``, averaged over nodes): recorded as
    ``node_mean_accuracy``, ``node_mean_loss``, ``node_min_accuracy``,
    ``node_max_accuracy``. For Decentralized SGD the models held are the n nodes' own; for
    Teleportation, the k tokens' models (the models of that round's k active nodes: the
    n - k inactive nodes hold none). It costs one evaluation per model (n, or k) at each
    evaluated round, computed on the root from the token matrix it already has, so the
    simulator and MPI give the same bits.

The fifth choice, the step-size schedule (timm's ``CosineLRScheduler`` with a 10-epoch
warm-up, in ``evaluate.py``), is :func:`cosine_with_warmup`, a function of the round to give
as ``lr=``: it is not part of the problem.

Known differences that remain: the authors' harness holds 10 % of each node's share out as
a validation set it never trains on (2,160 of 2,400 training samples a node; here every
sample trains unless ``val_fraction`` says otherwise); their initial weights come from
torch's generator, here from the project's numpy initialiser (the same distributions).

Command line: ``--problem mpi_teleport.problems.authors_recipe:authors`` (all four
choices) or ``...:with_<choice>[_<choice>...]`` (e.g. ``with_partition_crop``,
``with_evaluation``); the API: :func:`fashion_mnist` (``choices=``), or
:func:`mpi_teleport.problems.network.fashion_mnist` with ``recipe="authors"``.
"""
from __future__ import annotations

import math

import numpy as np

from .torch_problem import TorchProblem

__all__ = ["AUTHORS_COMMIT", "CHOICES", "RECIPES", "NodeMeanProblem", "fashion_mnist",
           "authors", "random_crop", "node_mean_metrics", "cosine_with_warmup",
           "check_choices"]

AUTHORS_COMMIT = "c89b116903dc3b3fc0670582e6e5fd27ef15e6cb"
CHOICES = ("partition", "model", "crop", "evaluation")
RECIPES = {"paper": (), "authors": CHOICES}
CROP_PADDING = 4
GROUP_SIZE = 10  # nodes per Dirichlet group (their num_auxiliary_workers)
NODE_METRICS = ("node_mean_accuracy", "node_mean_loss", "node_min_accuracy", "node_max_accuracy")


def check_choices(choices) -> tuple:
    """The recipe's choices, checked, in :data:`CHOICES` order (a name of
    :data:`RECIPES` stands for its choices)."""
    if isinstance(choices, str):
        if choices not in RECIPES:
            raise ValueError(f"recipe {choices!r}: choose one of {', '.join(RECIPES)}")
        return RECIPES[choices]
    chosen = tuple(choices)
    bad = [c for c in chosen if c not in CHOICES]
    if bad:
        raise ValueError(f"unknown recipe choice(s) {', '.join(map(repr, bad))}; choose "
                         f"among {', '.join(CHOICES)}")
    return tuple(c for c in CHOICES if c in chosen)


# ------------------------------------------------------------------------- inputs
def random_crop(inputs, generator, padding: int = CROP_PADDING):
    """Each image of ``inputs`` (a float tensor N x C x H x W) cropped back to H x W from
    a copy padded by ``padding`` zeros on every side, at offsets drawn uniformly from
    0..2*padding (rows, then columns, per image) with ``generator``: torchvision's
    ``RandomCrop(size, padding)`` on every image, its draws from the given generator."""
    import torch
    from torch.nn import functional as F

    n, _, h, w = inputs.shape
    offsets = torch.randint(0, 2 * padding + 1, (n, 2), generator=generator)
    padded = F.pad(inputs, (padding, padding, padding, padding))
    return torch.stack([padded[i, :, int(a):int(a) + h, int(b):int(b) + w]
                        for i, (a, b) in enumerate(offsets.tolist())])


def _unnormalised(images):
    """Fashion-MNIST images scaled to [0, 1] without normalisation (ToTensor's inputs)."""
    from . import datasets
    from .image_rows import ImageRows

    if isinstance(images, ImageRows):
        return ImageRows(images.raw, (0.0,), (1.0,), images.index, images.file)
    # (torchvision's old processed files are loaded whole and normalised: undo it)
    return (images * np.float32(datasets.FMNIST_STD[0]) + np.float32(datasets.FMNIST_MEAN[0]))


# --------------------------------------------------------------------- evaluation
def node_mean_metrics(problem, x: np.ndarray, test) -> dict:
    """Every row of the token matrix ``x`` evaluated on the whole set ``test`` = (images,
    labels) with ``problem``'s model, one thread, in chunks of its ``eval_batch_size``
    summed in float64 in chunk order: the mean over the rows of their accuracy and loss,
    and the smallest and largest accuracy. The same bits in every process."""
    import torch
    from torch.nn import functional as F

    images, labels = test
    n, size = len(labels), problem.eval_batch_size
    accuracy, loss = [], []
    with problem.torch_settings, torch.no_grad():
        problem.model.eval()
        for row in x:
            problem.state.load(row)
            total, correct = 0.0, 0
            for s in range(0, n, size):
                xb = torch.from_numpy(np.ascontiguousarray(images[s:s + size], dtype=np.float32))
                yb = torch.from_numpy(np.ascontiguousarray(labels[s:s + size], dtype=np.int64))
                if problem.device.type != "cpu":
                    xb, yb = xb.to(problem.device), yb.to(problem.device)
                out = problem.model(xb)
                total += float(F.cross_entropy(out, yb, reduction="sum").double())
                correct += int((out.argmax(1) == yb).sum())
            accuracy.append(correct / n)
            loss.append(total / n)
    return {"node_mean_accuracy": math.fsum(accuracy) / len(accuracy),
            "node_mean_loss": math.fsum(loss) / len(loss),
            "node_min_accuracy": min(accuracy), "node_max_accuracy": max(accuracy)}


class NodeMeanProblem(TorchProblem):
    """A :class:`~.torch_problem.TorchProblem` whose evaluation also reports the mean over
    the models held (:func:`node_mean_metrics`; the module docstring says which models).

    ``node_test``: a zero-argument function giving the whole test set (images, labels),
    called on first use only (the root of an MPI run is the only process that evaluates
    it; the other ranks never read it). ``recipe``: facts for config.json."""

    def __init__(self, *args, node_test, recipe: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self._node_test_source = node_test
        self._node_test: tuple | None = None  # (images, labels), read on first use
        self.recipe = dict(recipe)

    def metrics_from_sums(self, sums: np.ndarray, x: np.ndarray | None = None) -> dict:
        """The averaged model's metrics (:meth:`TorchProblem.metrics_from_sums`) and, with
        the token matrix ``x``, the node-mean ones."""
        m = super().metrics_from_sums(sums, x)
        if x is not None:
            if self._node_test is None:
                images, labels = self._node_test_source()
                self._node_test = (np.asarray(images[0:len(labels)], dtype=np.float32),
                                   np.asarray(labels, dtype=np.int64))
            m.update(node_mean_metrics(self, np.atleast_2d(x), self._node_test))
        return m

    def describe(self) -> dict:
        return {**super().describe(), "recipe": self.recipe}


# ------------------------------------------------------------------------ problem
def fashion_mnist(nodes: int, seed: int = 0, *, choices=CHOICES, data_dir=None,
                  download: bool = False, alpha: float = 0.1, batch_size: int = 32,
                  val_fraction: float = 0.1, device="cpu", local_nodes=None, staged=None,
                  evaluation_part=None, sampling: str = "replacement"):
    """Fashion-MNIST with the authors' choices ``choices`` (a subset of :data:`CHOICES`,
    or a recipe name of :data:`RECIPES`); the other settings as
    :func:`mpi_teleport.problems.network.fashion_mnist`, which this is with no choice
    (except that it always is a :class:`NodeMeanProblem` when ``evaluation`` is chosen).
    Returns a TorchProblem."""
    from . import datasets, models, partitions
    from .classifier import classifier

    chosen = check_choices(choices)
    train_images, train_labels = datasets.open_fashion_mnist(data_dir, True, download=download)
    test_images, test_labels = datasets.open_fashion_mnist(data_dir, False, download=download)
    if "crop" in chosen:
        train_images, test_images = _unnormalised(train_images), _unnormalised(test_images)
    extra: dict = {}
    if "partition" in chosen:
        labels = train_labels
        if val_fraction:  # (the problem holds these out first: split what remains)
            kept, _ = partitions.train_val_split(len(labels), val_fraction, seed)
            labels = labels[kept]
        extra["partition"] = partitions.balanced_dirichlet_partition(labels, nodes, alpha, seed,
                                                                     GROUP_SIZE)
    if "crop" in chosen:
        extra["augment"] = random_crop
    recipe = {"choices": list(chosen), "authors_code": "github.com/yukiTakezawa/BaseGraph",
              "authors_commit": AUTHORS_COMMIT}
    if "evaluation" in chosen:
        def node_test():
            return test_images, test_labels
        extra["problem_class"] = NodeMeanProblem
        extra["problem_args"] = {"node_test": node_test, "recipe": recipe}
    models.configure_torch_threads(1)
    return classifier("lenet-gn" if "model" in chosen else "lenet5",
                      (train_images, train_labels), (test_images, test_labels), nodes, seed,
                      alpha=alpha, batch_size=batch_size, val_fraction=val_fraction,
                      device=device, local_nodes=local_nodes, staged=staged,
                      evaluation_part=evaluation_part, sampling=sampling, **extra)


def authors(nodes: int, seed: int = 0, **settings):
    """All four choices: ``--problem mpi_teleport.problems.authors_recipe:authors``."""
    return fashion_mnist(nodes, seed, choices=CHOICES, **settings)


def _factory(chosen: tuple):
    def factory(nodes: int, seed: int = 0, *, data_dir=None, download: bool = False,
                alpha: float = 0.1, batch_size: int = 32, val_fraction: float = 0.1,
                device="cpu", local_nodes=None, staged=None, evaluation_part=None,
                sampling: str = "replacement"):
        return fashion_mnist(nodes, seed, choices=chosen, data_dir=data_dir, download=download,
                             alpha=alpha, batch_size=batch_size, val_fraction=val_fraction,
                             device=device, local_nodes=local_nodes, staged=staged,
                             evaluation_part=evaluation_part, sampling=sampling)

    factory.__doc__ = f"Fashion-MNIST with the authors' {', '.join(chosen)}."
    return factory


def __getattr__(name: str):
    """``with_<choice>[_<choice>...]``: the factory of those choices, for ``--problem
    mpi_teleport.problems.authors_recipe:with_partition_crop`` and the like."""
    if name.startswith("with_"):
        words = name[len("with_"):].split("_")
        if words and all(w in CHOICES for w in words) and len(set(words)) == len(words):
            return _factory(check_choices(words))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def authors_flags(choices) -> str:
    """The ``--problem`` value of a set of choices (``fashion-mnist`` for none)."""
    chosen = check_choices(choices)
    if not chosen:
        return "fashion-mnist"
    if chosen == CHOICES:
        return f"{__name__}:authors"
    return f"{__name__}:with_{'_'.join(chosen)}"


# ---------------------------------------------------------------------- schedule
def cosine_with_warmup(lr: float, epochs: float, rounds_per_epoch: float, *,
                       warmup_epochs: int = 10, warmup_lr: float = 5e-5,
                       lr_min: float = 1e-4):
    """The authors' step-size schedule as a pure function of the round (``lr=`` of the
    API): timm's ``CosineLRScheduler(t_initial=epochs, lr_min=1e-4, warmup_t=10,
    warmup_lr_init=5e-5, warmup_prefix=True)`` stepped once per epoch (``evaluate.py``).

    Round t is in epoch ``e = floor(t / rounds_per_epoch)``; epoch e trains with
    ``warmup_lr + e * (lr - warmup_lr) / warmup_epochs`` while ``e < warmup_epochs``, then
    ``lr_min + (lr - lr_min) * (1 + cos(pi * (e - warmup_epochs) / epochs)) / 2`` (``lr_min``
    from ``epochs`` epochs after the warm-up on). The cosine spans ``epochs`` epochs *after*
    the warm-up (their ``warmup_prefix``), so a run of ``epochs`` epochs ends before it
    reaches ``lr_min``; a 10-epoch run is all warm-up."""
    lr, epochs, per = float(lr), float(epochs), float(rounds_per_epoch)
    if not (lr > 0 and epochs > 0 and per > 0):
        raise ValueError("cosine_with_warmup needs lr, epochs and rounds_per_epoch > 0")

    def at(t: int) -> float:
        e = int(math.floor(int(t) / per))
        if e < warmup_epochs:
            return warmup_lr + e * (lr - warmup_lr) / warmup_epochs
        e -= warmup_epochs
        if e >= epochs:
            return lr_min
        return lr_min + 0.5 * (lr - lr_min) * (1.0 + math.cos(math.pi * e / epochs))

    at.base = lr  # type: ignore[attr-defined]  # (named in messages, as core.spec.cosine_lr)
    at.checked = True  # type: ignore[attr-defined]
    return at
