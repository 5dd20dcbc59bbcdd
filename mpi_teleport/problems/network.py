"""The built-in classification problems (paper Sec. 5.2-5.3) as factories over
:class:`~.torch_problem.TorchProblem`: a small CNN on scikit-learn's bundled 8x8 digits
(real data, no download: the offline demo and the network path of the tests), LeNet-5 on
Fashion-MNIST, VGG-11 (GroupNorm) on CIFAR-10.

Each factory follows the ``--problem`` calling convention (keyword arguments ``nodes``
and ``seed``, then its settings) and returns a TorchProblem: the model from
:func:`.models.build_model` (initialised from the seed with numpy, the same in every
process), node i's data its Dirichlet(alpha) share of the training set (with
``local_nodes=[i]``, an MPI rank's setting, the only training data kept), mini-batches keyed
by (seed, i, t), a validation split held out from training for ``--k auto`` (never the
test set), evaluation of the averaged model on the test set. These models have no
buffers, so a token is exactly their parameters.
"""
from __future__ import annotations

from .classifier import classifier
from .device import pick_device  # noqa: F401  (its historical home)

DATASET_SIZES = {"fashion-mnist": 60000, "cifar10": 50000}


def digits(nodes: int, seed: int = 0, *, alpha: float = 0.1, batch_size: int = 32,
           val_fraction: float = 0.1, device="cpu", local_nodes=None, staged=None,
           evaluation_part=None, sampling: str = "replacement"):
    """DigitsCNN on scikit-learn's 8x8 digits (fixed stratified 80/20 train/test split).

    Parameters are those of :class:`~.torch_problem.TorchProblem` (``val_fraction`` is
    its ``validation_fraction``). Returns a TorchProblem.
    """
    from . import datasets

    return classifier("digits-cnn", datasets.load_digits_dataset(True, seed=0),
                      datasets.load_digits_dataset(False, seed=0), nodes, seed, alpha=alpha,
                      batch_size=batch_size, val_fraction=val_fraction, device=device,
                      local_nodes=local_nodes, staged=staged,
                      evaluation_part=evaluation_part, sampling=sampling)


def fashion_mnist(nodes: int, seed: int = 0, *, data_dir=None, download: bool = False,
                  alpha: float = 0.1, batch_size: int = 32, val_fraction: float = 0.1,
                  device="cpu", local_nodes=None, staged=None, evaluation_part=None,
                  sampling: str = "replacement", recipe="paper"):
    """LeNet-5 on Fashion-MNIST memory-mapped from ``data_dir``
    (:func:`.datasets.open_fashion_mnist`: with ``local_nodes`` only those nodes' images
    and the evaluation slice are read; raises its one-line DatasetMissingError when the
    files are absent). ``data_dir`` None: ``./data`` if it holds the files, else Debian's
    ``/usr/share/datasets/fashion-mnist`` (:mod:`.fashion_files`).

    ``recipe``: ``"paper"`` (default: the paper's table, as above), ``"authors"`` (the
    authors' harness: balanced Dirichlet shares, LeNet with GroupNorm, random crops
    without normalisation, node-mean evaluation beside the averaged model), or a
    subset of ``("partition", "model", "crop", "evaluation")``
    (:mod:`.authors_recipe`)."""
    from . import datasets

    if recipe != "paper":
        from . import authors_recipe

        return authors_recipe.fashion_mnist(
            nodes, seed, choices=recipe, data_dir=data_dir, download=download, alpha=alpha,
            batch_size=batch_size, val_fraction=val_fraction, device=device,
            local_nodes=local_nodes, staged=staged, evaluation_part=evaluation_part,
            sampling=sampling)

    return classifier("lenet5", datasets.open_fashion_mnist(data_dir, True, download=download),
                      datasets.open_fashion_mnist(data_dir, False, download=download), nodes,
                      seed, alpha=alpha, batch_size=batch_size, val_fraction=val_fraction,
                      device=device, local_nodes=local_nodes, staged=staged,
                      evaluation_part=evaluation_part, sampling=sampling)


def cifar10(nodes: int, seed: int = 0, *, data_dir=None, download: bool = False,
            alpha: float = 0.1, batch_size: int = 32, val_fraction: float = 0.1,
            device="cpu", local_nodes=None, staged=None, evaluation_part=None,
            sampling: str = "replacement"):
    """VGG-11 (GroupNorm) on CIFAR-10 from ``data_dir``, memory-mapped from a one-time
    ``.npy`` copy of the pickles (:func:`.datasets.open_cifar10`)."""
    from . import datasets

    data_dir = "data" if data_dir is None else data_dir
    return classifier("vgg11", datasets.open_cifar10(data_dir, True, download=download),
                      datasets.open_cifar10(data_dir, False, download=download), nodes, seed,
                      alpha=alpha, batch_size=batch_size, val_fraction=val_fraction,
                      device=device, local_nodes=local_nodes, staged=staged,
                      evaluation_part=evaluation_part, sampling=sampling)


FACTORIES = {"digits": digits, "fashion-mnist": fashion_mnist, "cifar10": cifar10}


def from_settings(cfg, device: str = "cpu", staged: bool | None = None, local_nodes=None):
    """The network problem ``cfg`` names (a :class:`~mpi_teleport.problems.ProblemSettings`:
    ``cfg.problem``, its data and split settings), on ``device``. ``staged``, ``local_nodes``: see :class:`~.torch_problem.TorchProblem`."""
    settings = dict(alpha=cfg.alpha, batch_size=cfg.batch_size, val_fraction=cfg.val_fraction,
                    sampling=cfg.sampling, device=device, staged=staged, local_nodes=local_nodes)
    if cfg.elastic and local_nodes is not None:
        # elastic mode: the survivors split the evaluation among themselves, so every
        # rank keeps the whole evaluation sets (mpi_teleport/DESIGN.md §11)
        settings["evaluation_part"] = (0, 1)
    if cfg.problem != "digits":
        settings.update(data_dir=cfg.data_dir, download=cfg.download)
    return FACTORIES[cfg.problem](nodes=cfg.nodes, seed=cfg.seed, **settings)


NetworkProblem = from_settings  # the former class's constructor, for existing callers
