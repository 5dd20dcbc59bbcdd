"""Classification with neural networks (paper Sec. 5.2-5.3): LeNet-5 on Fashion-MNIST,
VGG-11 (GroupNorm) on CIFAR-10, and a small CNN on scikit-learn's bundled 8x8 digits
(real data, no download: the offline demo and the network path of the tests).

A token is one float32 vector: the model's parameters and floating buffers (averaged by
gossip); its momentum is the runtime's separate ``v`` vector, which travels with the
token and is never averaged. Node i's data is its Dirichlet(alpha) share of the training
set; its mini-batch in round t is drawn by a generator keyed by (seed, i, t), so a token
visiting node i draws from node i's data whatever the placement. Evaluation uses the
*averaged* model of the tokens (all nodes for DSGD); ``--k auto`` selects by accuracy on
a validation split held out from training, never the test set. torch is imported only
here, and only when a network problem is asked for.
"""
from __future__ import annotations

import math

import numpy as np

from .. import rng

DATASET_SIZES = {"fashion-mnist": 60000, "cifar10": 50000}


def _load(cfg, train: bool):
    from . import datasets

    if cfg.problem == "digits":
        return datasets.load_digits_dataset(train, seed=0)
    if cfg.problem == "fashion-mnist":
        return datasets.load_fashion_mnist(cfg.data_dir, train, download=cfg.download)
    return datasets.load_cifar10(cfg.data_dir, train, download=cfg.download)


def pick_device(requested: str, local: int = 0) -> str:
    """'cpu' or 'cuda:<local rank mod GPUs>'; ``local`` is this rank's index on its host
    (the transport's shared-memory split, taken by every rank before anything can fail)."""
    import torch

    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return "cpu"
    if not torch.cuda.is_available():
        from ..errors import UsageError

        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise UsageError(f"--device cuda: no CUDA device is visible to this process (torch "
                         f"{torch.__version__}, {build}); ask the job for GPUs, check "
                         "CUDA_VISIBLE_DEVICES, or use --device auto / cpu")
    return f"cuda:{local % torch.cuda.device_count()}"


class NetworkProblem:
    metric = "accuracy"  # larger is better; target reached when accuracy >= target
    validation = "validation accuracy"
    validation_higher_is_better = True
    dtype = np.float32

    def __init__(self, cfg, device: str = "cpu", staged: bool | None = None):
        """``staged``: keep the model apart from the token vector and copy between them
        (host staging; what a GPU rank does). Default: only off the CPU. Otherwise the
        model's tensors are views into one flat vector (models.FlatState) that a token is
        copied into."""
        import torch

        from . import datasets, models

        models.configure_torch_threads(1)  # bit-reproducible CPU kernels (see models.py)
        self.cfg, self.n, self.seed = cfg, cfg.nodes, cfg.seed
        self.batch_size = cfg.batch_size
        x_all, y_all = _load(cfg, train=True)
        train, val = datasets.train_val_split(len(y_all), cfg.val_fraction, cfg.seed)
        self.x_train, self.y_train = x_all[train], y_all[train]
        self.x_val, self.y_val = x_all[val], y_all[val]
        self.x_test, self.y_test = _load(cfg, train=False)
        self.parts = datasets.dirichlet_partition(self.y_train, self.n, cfg.alpha, cfg.seed)
        self.class_histogram = datasets.class_histogram(self.y_train, self.parts, 10)
        self.model = models.build_model(models.MODEL_FOR_PROBLEM[cfg.problem], cfg.seed)
        self.device = torch.device(device)
        if staged is None:
            staged = self.device.type != "cpu"
        if staged:  # host staging: the token vector lives on the host, the model on the GPU
            self.flat = None
            self.model.to(self.device)
            self._params = list(self.model.parameters())
            self._initial = torch.nn.utils.parameters_to_vector(self._params).detach().cpu().numpy()
        else:
            self.flat = models.FlatState(self.model)
            self._initial = self.flat.params_and_buffers.copy()
        self.n_params = sum(p.numel() for p in self.model.parameters())

    @property
    def n_train(self) -> int:
        return len(self.y_train)

    @property
    def dim(self) -> int:
        return len(self._initial)

    def initial(self) -> np.ndarray:
        return self._initial.copy()

    def batch(self, node: int, t: int) -> np.ndarray:
        """Indices of node's mini-batch in round t: keyed by (seed, node, t)."""
        part = self.parts[node]
        gen = rng.scratch_generator(self.seed, rng.STREAM_BATCH, t, node)
        return part[gen.integers(0, len(part), size=self.batch_size)]

    def _load_vector(self, row: np.ndarray) -> None:
        import torch

        if self.flat is not None:
            np.copyto(self.flat.params_and_buffers, row)
        else:
            torch.nn.utils.vector_to_parameters(torch.from_numpy(row).to(self.device), self._params)

    def _loss_and_grad(self, xb, yb) -> np.ndarray:
        import torch
        from torch.nn import functional as F

        from . import models

        if self.flat is not None:
            models.loss_and_grad(self.flat, xb, yb)
            return self.flat.grad
        self.model.zero_grad(set_to_none=False)
        out = self.model(torch.from_numpy(xb).to(self.device))
        F.cross_entropy(out, torch.from_numpy(yb).to(self.device)).backward()
        return torch.nn.utils.parameters_to_vector([p.grad for p in self._params]).cpu().numpy()

    def gradient(self, nodes, x: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Mini-batch gradients, one token after another (buffers get zero gradient)."""
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        out = np.zeros_like(x) if out is None else out
        for r, node in enumerate(nodes):
            idx = self.batch(int(node), t)
            self._load_vector(x[r])
            out[r, :self.n_params] = self._loss_and_grad(self.x_train[idx], self.y_train[idx])
            out[r, self.n_params:] = 0.0
        return out

    @staticmethod
    def average(x: np.ndarray) -> np.ndarray:
        """Mean of the token rows, summed in token order in float64, rounded once."""
        return (np.add.reduce(x.astype(np.float64), axis=0) / len(x)).astype(np.float32)

    def _accuracy(self, vector, xs, ys) -> dict:
        from . import models

        self._load_vector(vector)
        return models.evaluate(self.model, xs, ys, device=self.device)

    def evaluate(self, x: np.ndarray) -> dict:
        """Test loss/accuracy of the averaged token model, and the consensus distance."""
        mean = self.average(x)
        m = self._accuracy(mean, self.x_test, self.y_test)
        centred = x.astype(np.float64) - mean.astype(np.float64)
        m["consensus"] = math.fsum(np.sum(centred * centred, axis=1).tolist()) / len(x)
        return m

    def validate(self, x: np.ndarray) -> float:
        """Validation accuracy of the averaged model (Algorithm 2's selection)."""
        return self._accuracy(self.average(x), self.x_val, self.y_val)["accuracy"]

    def reached(self, metrics: dict, target: float) -> bool:
        return metrics["accuracy"] >= target

    def finite(self, metrics: dict) -> bool:
        return math.isfinite(metrics["loss"])
