"""Any torch model and data set as a :class:`~mpi_teleport.problem.Problem`.

:class:`TorchProblem` wraps a ``torch.nn.Module`` (or a function building one) and a
training set split over the nodes, and turns token vectors into mini-batch gradients and
metrics; the built-in network problems are factories over it (:mod:`.network`). torch is
imported only when a problem is built. What a token is and why every back end computes
the same bits: mpi_teleport/DESIGN.md §5.3. Its parts, one concern each:
:mod:`.torch_sets` (which samples are held), :mod:`.torch_data` (samples, batches,
tuple/dict items), :mod:`.torch_state` (token <-> model, ``module(x)``),
:mod:`.torch_metrics` (loss, accuracy, :class:`~.torch_metrics.EvalMetric`),
:mod:`.torch_evaluation` (chunked evaluation of the averaged model),
:mod:`.keyed_random` (random draws keyed by (seed, node, t)), :mod:`.torch_options`
(option checks, scoped torch settings).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core import rng
from ..core.evaluation import chunk_slices  # noqa: F401  (re-exported)
from . import torch_evaluation as te
from . import torch_metrics as tm
from .keyed_random import KeyedGlobals, augment_generator
from .torch_data import call_model, to_device
from .torch_checks import check_first_batch, check_losses, usable_device
from .torch_metrics import EvalMetric
from .torch_options import (build, check_token, non_negative, positive_int, regularise,
                            TorchSettings)
from .sampling import check_sampling, epoch_batch
from .subsample import fixed_subsample
from .torch_sets import TRAIN_EVAL_SAMPLES, node_data
from .torch_state import ModelState, load_into

__all__ = ["TorchProblem", "EvalMetric", "load_into", "chunk_slices", "EVAL_BATCH_SIZE",
           "TRAIN_EVAL_SAMPLES"]

# Samples per evaluation chunk (the chunks' global boundaries). A chunk's forward pass is
# the evaluation's peak memory: LeNet-5 on 1,000 Fashion-MNIST images adds ~80 MB to a
# rank's peak resident memory, on 250 ~28 MB, and runs no slower on the CPU.
EVAL_BATCH_SIZE = 250


def device_generators(torch, device) -> list:
    """The accelerator's default generator(s) a forward pass on ``device`` draws from
    (dropout on a GPU), keyed per row like the CPU's: CUDA's and XPU's per device index,
    MPS's one; none for the CPU or an accelerator whose generator torch does not expose."""
    if device.type == "cpu":
        return []
    module: Any = getattr(torch, device.type, None)  # (torch.cuda for CUDA: not None)
    if device.type == "cuda" or getattr(module, "default_generators", None):
        index = device.index if device.index is not None else module.current_device()
        return [module.default_generators[index]]  # (CUDA's: filled once it is initialised)
    get = getattr(module, "_get_default_mps_generator", None) if device.type == "mps" else None
    return [get()] if get is not None else []


class TorchProblem:
    """A torch model trained over ``nodes`` nodes, each holding its share of the data.

    >>> import numpy as np, torch
    >>> from mpi_teleport.problems.torch_problem import TorchProblem
    >>> gen = np.random.default_rng(0)
    >>> X = gen.standard_normal((200, 4)).astype(np.float32)
    >>> y = (X[:, 0] > 0).astype(np.int64)
    >>> def mlp():
    ...     return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
    ...                                torch.nn.Linear(8, 2))
    >>> p = TorchProblem(mlp, (X, y), nodes=4, seed=1, test=(X[:50], y[:50]),
    ...                  validation_fraction=0.1, batch_size=16)
    >>> p.dim, p.n_train
    (58, 180)
    >>> x = np.stack([p.initial()] * 2)
    >>> g = p.gradient([0, 3], x, t=0)
    >>> np.array_equal(g[1:], p.gradient([3], x[1:], t=0))
    True
    >>> sorted(p.evaluate(x))
    ['accuracy', 'consensus', 'loss']
    >>> type(p.module(x[0])).__name__
    'Sequential'

    Implements :class:`mpi_teleport.problem.Problem` (with ``validate``, ``after_step``,
    ``training_metrics``, ``n_train``, ``reached``, ``finite`` and ``describe``); see the
    module docstring.

    Parameters
    ----------
    model : torch.nn.Module or callable
        The network, float32. A module is copied and its state *as constructed* is the
        initial token (build it the same way in every process); a zero-argument builder
        is called under ``torch.manual_seed(seed)`` (the generator restored afterwards).
        Parameters with ``requires_grad=False`` are frozen: not trained, not sent.
    train : (X, y) or torch.utils.data.Dataset
        Inputs and targets as arrays/tensors of equal length, or a map-style data set
        of ``(input, target)`` items, ``(x1, x2, ..., target)`` tuples or dicts with a
        ``"target"``/``"label"`` entry (:mod:`.torch_data`).
    nodes, seed : int
        Number of nodes; the seed keys partition, splits, batches and random draws.
    task : {"classification", "regression", "multilabel"}, optional
        Default: inferred from the targets (integer labels: classification; an integer
        0/1 matrix: multilabel; floating: regression). Sets the default loss
        (cross-entropy, mean squared error, binary cross-entropy on logits) and whether
        ``accuracy`` is reported (multilabel: the share of labels right).
    loss : callable, optional
        ``loss(output, target) -> scalar`` (the batch mean) for training.
    eval_loss : callable, optional
        The loss reported by evaluation (default: ``loss``); e.g. plain cross-entropy
        when training with label smoothing.
    partition : "iid", "dirichlet" or list of index arrays
        Default "iid": equal shuffled shares, as a plain script's one data loader sees
        the data; "dirichlet": Dirichlet(``alpha``)
        over the class labels, the paper's non-IID split (the default when ``alpha`` is
        given); or ``partition[i]``, node i's training-sample indices.
    alpha : float, optional
        Concentration of the Dirichlet partition (small: few classes per node; 0.1, the
        paper's, when ``partition="dirichlet"`` is given without it). Unused by the
        other partitions.
    batch_size : int
        Samples per node and round.
    sampling : str
        How a node draws its batches: ``"replacement"`` (default: each round's batch drawn
        with replacement, keyed by (seed, node, t)) or ``"epochs"`` (shuffled passes over
        the node's share, as ``DataLoader(shuffle=True)``; keyed by (seed, node, pass):
        :mod:`.sampling`).
    weight_decay : float
        L2 penalty: ``weight_decay * w`` added to the trainable parameters' gradient (as
        ``torch.optim.SGD``'s ``weight_decay``). Default 0.
    clip_norm : float, optional
        Rescale a row's gradient to this norm when larger (``clip_grad_norm_``).
    augment : callable, optional
        ``augment(inputs, generator) -> inputs``: applied to each training batch (not to
        evaluation); ``generator`` is a CPU ``torch.Generator`` keyed by (seed, node, t).
    collate_fn : callable, optional
        ``collate_fn(items) -> (inputs, targets)`` for a Dataset's items.
    metrics : list of EvalMetric, optional
        Extra metrics, each from per-batch sums (:class:`~.torch_metrics.EvalMetric`):
        the one way to add a metric; it works in every back end.
    metric : str, optional
        The headline metric (target, summary, Algorithm 2's selection). Default:
        ``accuracy`` for classification/multilabel, else ``loss``; ``loss`` when
        evaluating on the training sample.
    test : (X, y) or Dataset, optional
        Evaluated (averaged model) by :meth:`evaluate`. Default: the validation set,
        else a fixed sample of ``TRAIN_EVAL_SAMPLES`` training samples (seeded): the
        training loss of the averaged model.
    test_samples : int, optional
        Evaluate a fixed subsample of this many test samples (chosen by ``seed``, the
        same at every evaluation and in every process) instead of the whole test set:
        cheap frequent evaluation, e.g. with ``eval_every``.
    validation, validation_fraction
        Algorithm 2's selection set, given or held out of ``train`` (seeded).
    n_classes : int, optional
        Classes of the per-node histogram (default: largest label + 1).
    device : str or torch.device
        Where forward/backward passes run; ``"auto"``: the first GPU, else the CPU.
    local_nodes : sequence of int or "auto", optional
        The nodes this process computes (under MPI: ``[rank]``; the command line passes
        it): only their training shares and this rank's evaluation slice are kept.
        ``"auto"``: ``[rank]`` when an MPI launcher started one rank per node, else every
        node (:mod:`mpi_teleport.runtime.launched`), so one script runs alone and under
        ``launch`` unchanged.
    device_tokens : bool, optional
        Under MPI, hold token and momentum as torch tensors on ``device`` (default: on
        for a GPU).
    evaluation_part : (part, parts), optional
        Keep only this chunk-aligned slice of the evaluation sets (default: ``(i,
        nodes)`` for one local node i).
    eval_batch_size : int
        Samples per evaluation chunk.
    staged : bool, optional
        Keep the model apart from the token and copy (default: off the CPU only).
    x0 : array, optional
        Warm start: the initial token (e.g. an earlier run's ``Result.x``) instead of
        the model's state as built; its length must be :attr:`dim`.
    threads : int, "auto" or None
        torch intra-op threads while the problem computes, with deterministic algorithms
        (warn-only); both are put back when each call returns. 1 (default): every back
        end computes the same bits (the simulator equals ``mpirun`` bit for bit, whatever
        the machine). ``"auto"``: this process's share of its host's cores, cores / ranks
        on the host (the ranks counted by a shared-memory split of the run's
        communicator; all cores in the simulator): faster, deterministic for a given
        number of threads, but CPU kernels split their sums by thread, so results then
        depend on the threads each process gets (a LeNet gradient differs in the last
        bits between 1 and 2 threads) and the simulator no longer equals MPI bit for
        bit. An integer fixes the count; None leaves torch's settings alone.
    """

    dtype = np.float32

    def __init__(self, model, train, *, nodes: int, seed: int = 0, task: str | None = None,
                 loss=None, eval_loss=None, partition=None, alpha: float | None = None,
                 batch_size: int = 32, sampling: str = "replacement", weight_decay: float = 0.0,
                 clip_norm: float | None = None,
                 augment=None, collate_fn=None, metrics=None, metric: str | None = None,
                 test=None, validation=None, validation_fraction: float = 0.0,
                 n_classes: int | None = None, device="cpu", local_nodes=None,
                 eval_batch_size: int = EVAL_BATCH_SIZE, staged: bool | None = None,
                 threads: int | str | None = 1, evaluation_part=None,
                 device_tokens: bool | None = None, x0=None, test_samples: int | None = None):
        import torch

        tm.check_overrides(type(self), TorchProblem)
        self.torch_settings = TorchSettings(threads)
        self.n, self.seed = positive_int(nodes, "nodes"), int(seed)
        self.batch_size = positive_int(batch_size, "batch_size")
        self.eval_batch_size = positive_int(eval_batch_size, "eval_batch_size")
        self.sampling = check_sampling(sampling)
        self._epoch_orders: dict = {}  # node -> (epoch, its shuffled order): a memo, no state
        for name, fn in (("loss", loss), ("eval_loss", eval_loss), ("augment", augment),
                         ("collate_fn", collate_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
        self.weight_decay = non_negative(weight_decay, "weight_decay")
        self.clip_norm = None if clip_norm is None else non_negative(clip_norm, "clip_norm")
        self.augment, self.user_metrics = augment, tm.check_metrics(metrics)
        if isinstance(local_nodes, str) and local_nodes == "auto":  # (one rank per node)
            from ..runtime.launched import auto_local_nodes

            local_nodes = auto_local_nodes(self.n)
        if test_samples is not None:  # a fixed subsample: cheap frequent evaluation
            test = fixed_subsample(test, test_samples, self.seed)
        with self.torch_settings:
            self.data = node_data(train, nodes=self.n, seed=self.seed, task=task,
                                  partition=partition, alpha=alpha, test=test,
                                  validation=validation, validation_fraction=validation_fraction,
                                  n_classes=n_classes, local_nodes=local_nodes,
                                  evaluation_part=evaluation_part, collate_fn=collate_fn,
                                  eval_batch_size=self.eval_batch_size)
            self.loss = loss if loss is not None else tm.default_loss(self.data.task)
            self.eval_loss = eval_loss if eval_loss is not None else loss
            self.device = torch.device(usable_device(device))  # (torch_checks)
            staged = self.device.type != "cpu" if staged is None else staged
            self.state = ModelState(build(model, self.seed), self.device, staged)
        d = self.data  # (its facts, under the names the engine and the tests read)
        self.task, self.parts, self.class_histogram = d.task, d.parts, d.class_histogram
        self.local_nodes, self.evaluation_part, self.evaluated_on = (
            d.local_nodes, d.evaluation_part, d.evaluated_on)
        self._train, self._sets = d.train, d.sets
        if x0 is not None:  # warm start: a token of this model (e.g. an earlier Result.x)
            self.state.initial = check_token(x0, len(self.state.initial))
        self.model = self.state.model
        self.n_params, self.n_buffers = self.state.n_params, self.state.n_buffers
        self._pending: tuple | None = None  # gradient(): nodes, updated buffers, buffers as given
        self._train_stats: dict = {}  # round -> node -> batch loss (and accuracy)
        on = self.device.type != "cpu" if device_tokens is None else bool(device_tokens)
        self.token_device = str(self.device) if on else None  # read by the MPI back end
        generators = [torch.default_generator, *device_generators(torch, self.device)]
        self._keyed = KeyedGlobals(self.seed, generators, any(
            d.reads_items for d in (self._train, *self._sets.values())))
        self._augment_gen = torch.Generator() if augment is not None else None
        self.metric, self.higher_is_better = tm.headline(self.task, self.evaluated_on, metric,
                                                         self.user_metrics)
        self.validation = f"validation {self.metric}"
        self.validation_higher_is_better = self.higher_is_better
        with self.torch_settings:  # inputs and labels the model cannot take: one line
            check_first_batch(self.model, self.device, {"train": self._train, **self._sets},
                              self.task == "classification" and loss is None)
            # (eval_loss: only the user's; the default evaluation loss is the training one)
            check_losses(self.model, self.device, self._train, self.task,
                         {"loss": loss, **({"eval_loss": eval_loss} if eval_loss else {})},
                         self._target)

    # ---------------------------------------------------------------- sizes
    @property
    def classification(self) -> bool:
        return self.task == "classification"

    @property
    def flat(self):
        """The :class:`.models.FlatState` the model lives in (CPU), or None (staged)."""
        return self.state.flat

    @property
    def nodes(self) -> int:
        """The number of nodes the problem was built for (the API checks it)."""
        return self.n

    @property
    def dim(self) -> int:
        """Token length: trainable parameters plus floating buffers."""
        return len(self.state.initial)

    @property
    def param_shapes(self) -> tuple:
        """The trainable parameters' shapes, in token order (an optimizer steps them as
        the model's parameters: :class:`~mpi_teleport.core.optimizers.TorchRule`)."""
        return tuple(tuple(p.shape) for p in self.state.layout.params)

    @property
    def n_train(self) -> int:
        """Training samples over all nodes (validation excluded)."""
        return self.data.n_train

    @property
    def n_test(self) -> int:
        """Test samples (the whole set, also when only a slice is kept)."""
        return self.data.sizes["test"]

    @property
    def n_validation(self) -> int:
        return self.data.sizes["validation"]

    def data_bytes(self) -> dict:
        """Bytes of the samples held in memory by set ("train", "test", "validation")."""
        return {"train": int(self._train.nbytes),
                **{split: int(data.nbytes) for split, data in self._sets.items()}}

    def held_slice(self, split: str = "test") -> tuple:
        """The ``(lo, hi)`` samples of a set this problem keeps."""
        te.check_split(self, split)
        return self.data.held[split]

    def initial(self) -> np.ndarray:
        """The initial token (a copy): the model's state as built."""
        return self.state.initial.copy()

    def module(self, x: np.ndarray, *, train: bool = False):
        """A trained ``nn.Module`` (CPU, a new object) from a token, e.g. ``Result.x``.

        In ``eval()`` mode by default, ready for inference as the run's evaluation used it
        (dropout off, normalisation on its running statistics); ``train=True`` gives it in
        ``train()`` mode, as a freshly built module is, to train it further in a plain
        loop. Either way the mode is this argument's, never the problem's last use."""
        if not isinstance(train, bool):
            raise TypeError(f"train must be True or False, got {train!r}")
        return self.state.module(x).train(train)

    @staticmethod
    def load_into(model, x: np.ndarray):
        """Copy a token (e.g. ``Result.x``) into your own ``model``, built like the
        problem's: trainable parameters and floating buffers in token order; frozen
        parameters and integer buffers untouched. Returns ``model``."""
        return load_into(model, x)

    # ---------------------------------------------------------------- training
    def batch(self, node: int, t: int) -> np.ndarray:
        """Training-sample indices of ``node``'s mini-batch in round ``t``, a pure function
        of (seed, node, t): drawn with replacement from the node's share
        (``sampling="replacement"``), or batch ``t mod b`` of the node's shuffled pass
        number ``t div b`` over its share (``sampling="epochs"``, b = its batches per pass;
        :func:`epoch_batch`)."""
        return self.parts[node][self._draw(node, t)]

    def _draw(self, node: int, t: int) -> np.ndarray:
        size = len(self.parts[node])
        if self.sampling == "epochs":
            return epoch_batch(self._epoch_order, node, t, size, self.batch_size)
        gen = rng.scratch_generator(self.seed, rng.STREAM_BATCH, t, node)
        return gen.integers(0, size, size=self.batch_size)

    def _epoch_order(self, node: int, epoch: int, size: int) -> np.ndarray:
        """Node's shuffled order of its share for one pass, keyed by (seed, node, epoch)."""
        memo = self._epoch_orders.get(node)
        if memo is None or memo[0] != epoch:
            gen = rng.scratch_generator(self.seed, rng.STREAM_EPOCH, epoch, node)
            memo = (epoch, gen.permutation(size))
            self._epoch_orders[node] = memo
        return memo[1]

    def gradient(self, nodes, x: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Mini-batch gradients at the rows of ``x`` (``train()`` mode), one row after
        another. Row r: node ``nodes[r]``'s batch of round ``t`` (:meth:`batch`), with
        the random generators keyed by (seed, node, t) while it is read, augmented and
        passed forward; weight decay, then clipping; zero in the buffer slots."""
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        if x.ndim != 2 or x.shape != (len(nodes), self.dim):
            raise ValueError(f"gradient: x must have shape ({len(nodes)}, {self.dim}) for "
                             f"{len(nodes)} nodes, got {x.shape}")
        out = np.zeros_like(x) if out is None else out
        pending = np.empty((len(nodes), self.n_buffers), np.float32) if self.n_buffers else None
        self.model.train()
        with self.torch_settings, self._keyed as keyed:
            for r, node in enumerate(nodes):
                node = int(node)
                positions = self.data.positions(node)
                keyed.seed(node, t)
                xb, yb = self._train.take(positions[self._draw(node, t)])
                if self.augment is not None:
                    xb = self.augment(xb, augment_generator(self._augment_gen, self.seed, node, t))
                self.state.load(x[r])
                out[r, :self.n_params], stats = self._loss_and_grad(xb, yb)
                self._batch_stats(t)[node] = stats
                regularise(out[r, :self.n_params], x[r, :self.n_params], self.weight_decay,
                           self.clip_norm)
                out[r, self.n_params:] = 0.0
                if pending is not None:
                    pending[r] = self.state.buffer_values()
        if pending is not None:  # with the rows' buffers as given, to check after_step's y
            self._pending = (nodes.copy(), pending, x[:, self.n_params:].copy())
        return out

    def after_step(self, nodes, y: np.ndarray) -> None:
        """Write the floating buffers updated by the last :meth:`gradient` call (same
        nodes, same row order) into the buffer slots of the stepped rows ``y``; once
        after each gradient call, before the next."""
        if not self.n_buffers:
            return
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        if self._pending is None or not np.array_equal(self._pending[0], nodes):
            raise ValueError("after_step(nodes, y) must follow gradient() for the same nodes")
        # The step leaves buffer slots as they were (zero gradient, zero momentum there):
        # rows whose buffers changed are not the rows the pending statistics belong to.
        if not np.array_equal(y[:, self.n_params:], self._pending[2]):
            raise ValueError("after_step(nodes, y): y's rows are not the stepped rows of the last "
                             "gradient() call (call it once per gradient() call, before the next)")
        y[:, self.n_params:] = self._pending[1]
        self._pending = None

    def _target(self, yb):
        return yb if self.task == "classification" else yb.float()

    def _loss_and_grad(self, xb, yb) -> tuple:
        """The batch's gradient, and what the forward pass already says of the batch:
        its loss (and accuracy, classification), for the records (:meth:`training_metrics`)."""
        import torch

        self.state.zero_grad()
        if self.state.flat is None:
            xb, yb = to_device(xb, self.device), yb.to(self.device)
        output = call_model(self.model, xb)
        target = self._target(yb)
        loss = self.loss(output, target)
        loss.backward()
        stats = {"train_loss": float(loss.detach())}
        if self.task == "classification" and isinstance(output, torch.Tensor) and output.dim() == 2:
            with torch.no_grad():
                stats["train_accuracy"] = float((output.argmax(1) == target).double().mean())
        return self.state.grad(), stats

    def _batch_stats(self, t: int) -> dict:
        """Round t's node -> batch facts; only the latest rounds are kept (a record reads
        the round before it)."""
        t = int(t)
        rounds = self._train_stats
        if t not in rounds:
            for old in [u for u in rounds if u < t - 1]:
                del rounds[old]
            rounds[t] = {}
        return rounds[t]

    def training_metrics(self, t: int) -> dict:
        """node -> {"train_loss", "train_accuracy" (classification)} of the mini-batches
        this process computed in round ``t`` (the training loss in every record,
        :mod:`mpi_teleport.core.training`); empty for a round not computed here."""
        return dict(self._train_stats.get(int(t), {}))

    # ---------------------------------------------------------------- evaluation
    @staticmethod
    def average(x: np.ndarray) -> np.ndarray:
        """Mean of the token rows, summed in token order in float64, rounded once."""
        return te.average(x)

    def evaluation_sums(self, vector: np.ndarray, lo: int = 0, hi: int | None = None,
                        split: str = "test") -> np.ndarray:
        """Per-chunk sums of the model ``vector`` on samples ``[lo, hi)`` of a set
        ("test" or "validation"), one float64 row per chunk; rows of disjoint
        chunk-aligned slices concatenated in order equal the whole set's bit for bit
        (:func:`.torch_evaluation.chunk_sums`)."""
        return te.chunk_sums(self, vector, lo, hi, split)

    def metrics_from_sums(self, sums: np.ndarray, x: np.ndarray | None = None) -> dict:
        """``loss`` (mean), ``accuracy`` (not for regression) and the ``metrics`` from
        all chunk rows of :meth:`evaluation_sums` (added in chunk order); with the token
        matrix ``x``, also ``consensus`` (mean squared distance to the average)."""
        return te.metrics(self, sums, x)

    def evaluate(self, x: np.ndarray) -> dict:
        """Metrics of the averaged token model (``eval()`` mode) on the test set (or what
        stands in for it), and the ``consensus`` distance of the tokens. To add a
        metric, pass ``metrics=`` (do not override this: MPI does not call it)."""
        return self.metrics_from_sums(self.evaluation_sums(self.average(x)), x)

    @property
    def validation_unavailable(self) -> str | None:
        """Why :meth:`validate` cannot work (no validation set), or None: Algorithm 2
        refuses the problem at its start with this hint (the Problem contract)."""
        if "validation" in self._sets:
            return None
        return ("the TorchProblem has no validation set: build it with validation=(X, y) or "
                "validation_fraction=0.1 (Algorithm 2 selects k on held-out data, never on the "
                "test set)")

    def validate(self, x: np.ndarray) -> float:
        """The headline ``metric`` of the averaged model on the validation set:
        Algorithm 2's selection, never on the test set."""
        if "validation" not in self._sets:
            raise ValueError("validate() needs a validation set: build the TorchProblem with "
                             "validation= or validation_fraction > 0")
        sums = self.evaluation_sums(self.average(x), split="validation")
        return self.metrics_from_sums(sums)[self.metric]

    # ---------------------------------------------------------------- engine facts
    def reached(self, metrics: dict, target: float) -> bool:
        value = metrics[self.metric]
        return value >= target if self.higher_is_better else value <= target

    def finite(self, metrics: dict) -> bool:
        return math.isfinite(metrics["loss"])

    def describe(self) -> dict:
        """Facts for config.json: task, per-node class histogram (classification),
        training samples, parameters, what is evaluated, device."""
        facts = {} if self.class_histogram is None else {"class_histogram": self.class_histogram}
        frozen = int(sum(p.numel() for p in self.state.layout.frozen))
        return {**facts, "task": self.task, "n_train": self.n_train, "n_params": self.n_params,
                **({"n_frozen": frozen} if frozen else {}), "evaluated_on": self.evaluated_on,
                **({"sampling": self.sampling} if self.sampling != "replacement" else {}),
                "device": str(self.device)}

    def config_facts(self) -> dict:
        """What config.json says of the run's model beside :meth:`describe` (not compared
        by a resume): the model's class and the batch size."""
        return {"model": type(self.model).__name__, "batch_size": self.batch_size}

    def __repr__(self) -> str:
        return (f"TorchProblem({type(self.model).__name__}, nodes={self.n}, dim={self.dim}, "
                f"n_train={self.n_train}, device={self.device})")
