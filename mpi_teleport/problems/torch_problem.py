"""Any torch model and data set as a :class:`~mpi_teleport.problem.Problem`.

:class:`TorchProblem` wraps a ``torch.nn.Module`` (or a function building one) and a
training set, split over the nodes, and turns token vectors into mini-batch gradients
and metrics. The built-in network problems (digits, Fashion-MNIST, CIFAR-10) are
factories over it (:mod:`mpi_teleport.problems.network`). torch is imported only here
and in :mod:`.models`, and only when a torch problem is built.

What a token is
---------------
One float32 vector ``[parameters | floating buffers]``, in ``model.parameters()`` order,
then the floating buffers in ``model.modules()`` order (:class:`.models.StateLayout`);
the same layout on every device.

* Parameters are trained by the gradient; :meth:`TorchProblem.gradient` writes zeros in
  the buffer slots, so the local step leaves them as they were.
* Floating buffers (BatchNorm's running mean and variance) are part of the token, so
  gossip averages them like the parameters. The forward pass of
  :meth:`TorchProblem.gradient` (in ``train()`` mode) updates them; the engine calls
  :meth:`TorchProblem.after_step` right after the local step, which writes the updated
  values into the stepped rows. A token therefore carries the running statistics of the
  batches it was trained on, exactly as a single model would, and an MPI rank and the
  simulator compute the same values (each row's forward pass starts from that row).
* Integer and boolean buffers (BatchNorm's ``num_batches_tracked``) are not in the
  token: they are restored to their values as constructed before every forward pass, so
  a row's result depends on the row alone. (A BatchNorm built with ``momentum=None``,
  a cumulative average over ``num_batches_tracked``, therefore keeps the last batch's
  statistics.)
* Evaluation runs in ``eval()`` mode on the averaged token, buffers included.
* Random layers (dropout) draw from torch's generator seeded from (seed, node, t) for
  each row's forward pass, so they too are the same in every back end.

Determinism
-----------
Node i's mini-batch in round t is drawn by a generator keyed by (seed, i, t)
(:meth:`TorchProblem.batch`); evaluation is done in chunks of ``eval_batch_size`` samples
whose boundaries are global (multiples of it), and the per-chunk sums are added in chunk
order, so any split of the test set into chunk-aligned slices (one per rank) gives the
same bits (:meth:`TorchProblem.evaluation_sums`, :meth:`TorchProblem.metrics_from_sums`,
:func:`chunk_slices`). torch runs with one intra-op thread (``threads=1``) for the same
reason.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from .. import rng
from ..evaluation import chunk_slices  # noqa: F401  (re-exported)

__all__ = ["TorchProblem", "chunk_slices", "EVAL_BATCH_SIZE"]

# Samples per evaluation chunk (the chunks' global boundaries). A chunk's forward pass is
# the evaluation's peak memory: LeNet-5 on 1,000 Fashion-MNIST images adds ~80 MB to a
# rank's peak resident memory, on 250 ~28 MB, and runs no slower on the CPU.
EVAL_BATCH_SIZE = 250


# ------------------------------------------------------------------------ samples
def _batch_tensor(value, name: str):
    """A batch as a tensor with the dtypes tokens are trained with: floating -> float32,
    integer/boolean -> int64 (class labels, token ids)."""
    import torch

    t = torch.as_tensor(value)
    if t.is_floating_point():
        return t if t.dtype == torch.float32 else t.float()
    if t.dtype in (torch.complex64, torch.complex128):
        raise TypeError(f"{name}: complex data is not supported")
    return t if t.dtype == torch.int64 else t.long()


def _as_array(value, name: str) -> np.ndarray:
    """A numpy array (float32 or int64) from an array-like or a CPU/GPU tensor; no copy
    when it already is one of those."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    a = np.asarray(value)
    if a.dtype.kind == "f":
        return a.astype(np.float32, copy=False)
    if a.dtype.kind in "iub":
        return a.astype(np.int64, copy=False)
    raise TypeError(f"{name}: expected numbers, got an array of dtype {a.dtype}")


class _ArraySamples:
    """Samples as two numpy arrays, inputs ``x`` and targets ``y`` (same length)."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def take(self, idx):
        import torch

        return (torch.from_numpy(np.ascontiguousarray(self.x[idx])),
                torch.from_numpy(np.ascontiguousarray(self.y[idx])))

    def span(self, lo: int, hi: int):
        return self.take(slice(lo, hi))

    def labels(self) -> np.ndarray:
        return self.y

    def subset(self, idx) -> "_ArraySamples":
        """These samples; rows read lazily stay lazy (a memory-mapped set is not read)."""
        select = getattr(self.x, "select", None)
        return _ArraySamples(self.x[idx] if select is None else select(idx), self.y[idx])

    def keep(self, idx) -> "_ArraySamples":
        """These samples, held in memory (nothing else of the set is referenced)."""
        keep = getattr(self.x, "keep", None)
        x = self.x[idx] if keep is None else keep(idx)
        if isinstance(x, np.ndarray) and isinstance(idx, slice):
            x = x.copy()  # (a slice of an array is a view of all of it)
        return _ArraySamples(x, np.array(self.y[idx]))

    @property
    def nbytes(self) -> int:
        return int(self.x.nbytes) + int(self.y.nbytes)


class _DatasetSamples:
    """Samples of a map-style ``torch.utils.data.Dataset`` whose items are (input,
    target) pairs, read lazily through an index (only the items asked for are read)."""

    def __init__(self, dataset, index: np.ndarray | None = None, name: str = "dataset"):
        self.dataset, self.name = dataset, name
        self.index = np.arange(len(dataset), dtype=np.int64) if index is None else index

    def __len__(self) -> int:
        return len(self.index)

    def _pair(self, i: int):
        item = self.dataset[int(self.index[i])]
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"{self.name}: items must be (input, target) pairs, got "
                            f"{type(item).__name__}")
        return item

    def take(self, idx):
        from torch.utils.data import default_collate

        xb, yb = default_collate([self._pair(i) for i in np.asarray(idx).reshape(-1)])
        return _batch_tensor(xb, self.name), _batch_tensor(yb, self.name)

    def span(self, lo: int, hi: int):
        return self.take(np.arange(lo, hi))

    def labels(self) -> np.ndarray:
        """Every target: the data set's ``targets`` attribute when it has one of the
        right length (torchvision's data sets), else read item by item."""
        targets = getattr(self.dataset, "targets", None)
        if targets is not None and len(targets) == len(self.dataset):
            return _as_array(targets, self.name)[self.index]
        return _as_array([_batch_tensor(self._pair(i)[1], self.name).numpy()
                          for i in range(len(self))], self.name)

    def subset(self, idx) -> "_DatasetSamples":
        return _DatasetSamples(self.dataset, self.index[idx], self.name)

    keep = subset  # (the data set reads items on demand: only the index is held)

    @property
    def nbytes(self) -> int:
        return int(self.index.nbytes)


def _samples(data, name: str):
    """(X, y) arrays/tensors or a map-style Dataset -> samples object."""
    import torch

    if isinstance(data, torch.utils.data.Dataset):
        if not hasattr(data, "__getitem__") or not hasattr(data, "__len__"):
            raise TypeError(f"{name}: only map-style data sets (with __len__ and "
                            "__getitem__) are supported")
        if len(data) == 0:
            raise ValueError(f"{name}: the data set is empty")
        return _DatasetSamples(data, name=name)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x = data[0] if _reads_rows(data[0]) else _as_array(data[0], f"{name} inputs")
        y = _as_array(data[1], f"{name} targets")
        if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
            raise ValueError(f"{name}: inputs and targets must have the same length, got "
                             f"{x.shape[:1] or 'a scalar'} and {y.shape[:1] or 'a scalar'}")
        if len(y) == 0:
            raise ValueError(f"{name}: the data set is empty")
        return _ArraySamples(x, y)
    raise TypeError(f"{name} must be a pair (inputs, targets) of arrays/tensors or a "
                    f"map-style torch Dataset, got {type(data).__name__}")


def _reads_rows(x) -> bool:
    """An array-like that reads float32 rows when indexed and narrows without reading
    (``select``/``keep``, e.g. :class:`.datasets.ImageRows` over a memory map)."""
    return all(hasattr(x, a) for a in ("select", "keep", "shape", "__getitem__", "__len__"))


def _target_is_class(samples) -> bool:
    """Integer scalar targets: a classification problem (accuracy is reported)."""
    _, y = samples.take(np.arange(1))
    return not y.is_floating_point() and y.dim() == 1


# ------------------------------------------------------------------------ problem
class TorchProblem:
    """A torch model trained over ``nodes`` nodes, each holding its share of the data.

    Implements :class:`mpi_teleport.problem.Problem` (with ``validate``, ``after_step``,
    ``n_train``, ``reached``, ``finite`` and ``describe``). See the module docstring for
    what a token is (parameters and floating buffers) and why results are the same in
    the simulator and under MPI.

    Parameters
    ----------
    model : torch.nn.Module or callable
        The network, float32. A module instance is copied (the problem never touches
        yours) and its state *as constructed* is the initial token, so build it the same
        way in every process (e.g. ``torch.manual_seed(s)`` just before constructing it).
        A zero-argument function returning a module is called under
        ``torch.manual_seed(seed)`` (torch's global generator is restored afterwards),
        which gives the same initial token in every process with the same torch.
    train : (X, y) or torch.utils.data.Dataset
        Training set: inputs and targets as arrays or tensors of equal length, or a
        map-style data set of ``(input, target)`` items. Floating data are used as
        float32, integer data (class labels) as int64.
    nodes : int
        Number of nodes.
    seed : int
        Keys the partition, the validation split, the mini-batches and a builder's
        initialisation.
    loss : callable, optional
        ``loss(output, target) -> scalar tensor``, the mean over the batch. Default:
        cross-entropy. Evaluation reports its mean over the test set (a user loss is
        taken as the batch mean times the batch size).
    partition : list of index arrays, optional
        ``partition[i]``: training-sample indices (into ``train``, after any validation
        split) that node i holds; each non-empty, within range; they need not be
        disjoint. Default: Dirichlet(``alpha``) over the class labels
        (:func:`.datasets.dirichlet_partition`).
    alpha : float
        Concentration of the default Dirichlet partition (small: few classes per node).
    batch_size : int
        Samples per node and round.
    test : (X, y) or Dataset, optional
        Evaluated (averaged model) by :meth:`evaluate`. Default: the validation set.
    validation : (X, y) or Dataset, optional
        Algorithm 2's selection set (:meth:`validate`).
    validation_fraction : float
        Alternatively, hold this fraction of ``train`` out as the validation set (seeded
        split, :func:`.datasets.train_val_split`). Default 0: none.
    n_classes : int, optional
        Classes of the per-node histogram (default: largest label + 1).
    device : str or torch.device
        Where forward/backward passes run. ``"auto"``: the first GPU when one is visible,
        else the CPU (an MPI rank should pass its own, see :func:`.device.pick_device`).
    local_nodes : sequence of int, optional
        The nodes this process computes gradients for; training data of other nodes is
        not kept. Default: all nodes (the simulator). **Under MPI pass
        ``local_nodes=[comm.rank]``** (one node per rank; the command line does): the
        rank then keeps only its node's training share and its slice of the test and
        validation sets (``evaluation_part``), and with data given as memory-mappable
        arrays (``np.memmap``, :class:`.datasets.ImageRows`; the built-in data sets
        are) it never reads the rest. The Dirichlet split still sees every label, so
        every node gets the samples it gets in the simulator.
    device_tokens : bool, optional
        Under MPI, hold the rank's token, momentum and receive buffers as torch tensors
        on ``device`` and do the momentum step and the gossip sum there
        (:mod:`mpi_teleport.backends.device`). Default: on for a GPU device, off on the
        CPU (``True`` on the CPU runs the same code path on CPU tensors).
    evaluation_part : (part, parts), optional
        Keep only the ``part``-th of ``parts`` chunk-aligned slices
        (:func:`chunk_slices`) of the test and validation sets: what an MPI rank
        evaluates when the ranks share evaluation. Default: ``(i, nodes)`` for a single
        local node i, else the whole sets.
    eval_batch_size : int
        Samples per evaluation chunk.
    staged : bool, optional
        Keep the model apart from the token vector and copy between them (what a GPU
        does). Default: only off the CPU; on the CPU the model's tensors are zero-copy
        views into one flat vector (:class:`.models.FlatState`).
    threads : int or None
        torch intra-op threads (1: bit-reproducible CPU kernels); None leaves torch's
        setting alone.

    Examples
    --------
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
    """

    dtype = np.float32

    def __init__(self, model, train, *, nodes: int, seed: int = 0, loss=None,
                 partition=None, alpha: float = 0.1, batch_size: int = 32, test=None,
                 validation=None, validation_fraction: float = 0.0,
                 n_classes: int | None = None, device="cpu", local_nodes=None,
                 eval_batch_size: int = EVAL_BATCH_SIZE, staged: bool | None = None,
                 threads: int | None = 1, evaluation_part=None,
                 device_tokens: bool | None = None):
        import torch

        from . import datasets, models

        if threads is not None:
            models.configure_torch_threads(threads)
        self.n, self.seed = _positive_int(nodes, "nodes"), int(seed)
        self.batch_size = _positive_int(batch_size, "batch_size")
        self.eval_batch_size = _positive_int(eval_batch_size, "eval_batch_size")
        if loss is not None and not callable(loss):
            raise TypeError(f"loss must be a function loss(output, target), got {type(loss).__name__}")
        self.loss = loss

        # -- data: training share per node, validation and test sets
        samples = _samples(train, "train")
        if validation is not None and validation_fraction:
            raise ValueError("give either validation= or validation_fraction, not both")
        val = None if validation is None else _samples(validation, "validation")
        if validation_fraction:
            kept, held = datasets.train_val_split(len(samples), validation_fraction, self.seed)
            samples, val = samples.subset(kept), samples.subset(held)
        self._n_train = len(samples)
        self.classification = _target_is_class(samples)
        labels = samples.labels() if self.classification else None
        _refuse_negative_labels(labels, "train")  # (before the partition counts them)
        if partition is None:
            if labels is None:
                raise ValueError("the default Dirichlet partition needs integer class labels; "
                                 "for other targets give partition= (index lists, one per node)")
            self.parts = datasets.dirichlet_partition(labels, self.n, alpha, self.seed)
        else:
            self.parts = _check_partition(partition, self.n, self._n_train)
        self.class_histogram = None
        if labels is not None:
            classes = int(labels.max()) + 1 if n_classes is None else int(n_classes)
            self.class_histogram = datasets.class_histogram(labels, self.parts, classes)
        self.local_nodes = _check_local_nodes(local_nodes, self.n)
        if local_nodes is None:
            self._train, self._local_parts = samples, self.parts
        else:  # keep only the local nodes' samples; positions re-indexed into them
            kept = np.unique(np.concatenate([self.parts[i] for i in self.local_nodes]))
            self._train = samples.keep(kept)
            local = set(self.local_nodes)
            self._local_parts = [np.searchsorted(kept, p) if i in local else None
                                 for i, p in enumerate(self.parts)]
        test = _samples(test, "test") if test is not None else val
        if test is None:
            raise ValueError("nothing to evaluate on: give test= (or a validation set: "
                             "validation= or validation_fraction)")
        if evaluation_part is None and local_nodes is not None and len(self.local_nodes) == 1:
            evaluation_part = (self.local_nodes[0], self.n)
        self.evaluation_part = _check_part(evaluation_part)
        self._sizes = {"test": len(test), "validation": 0 if val is None else len(val)}
        self._held, self._sets = {}, {}
        for split, data in (("test", test), ("validation", val)):
            if data is None:
                continue
            lo, hi = 0, len(data)
            if self.evaluation_part is not None:  # only this process's slice is kept
                lo, hi = chunk_slices(len(data), self.eval_batch_size,
                                      self.evaluation_part[1])[self.evaluation_part[0]]
                data = data.keep(slice(lo, hi))
            self._held[split], self._sets[split] = (lo, hi), data
        self._val = self._sets.get("validation")
        self._test = self._sets["test"]

        # -- model and token layout
        self.model = _build(model, self.seed)
        layout = models.StateLayout(self.model)
        bad = [t.dtype for t in layout.tensors() if t.dtype != torch.float32]
        if bad:
            raise TypeError(f"the model must be float32 (tokens are float32 vectors), found "
                            f"{bad[0]} tensors; convert it with model.float()")
        self.device = torch.device(_usable_device(device))
        if staged is None:
            staged = self.device.type != "cpu"
        self.n_params, self.n_buffers = layout.n_params, layout.n_buffers
        if staged:  # token vector on the host, model on the device; copies between
            self.flat = None
            self._initial = np.concatenate(
                [t.detach().reshape(-1).cpu().numpy() for t in layout.tensors()]
                or [np.zeros(0, np.float32)]).astype(np.float32)
            self.model.to(self.device)
            self._layout = models.StateLayout(self.model)  # the moved tensors
        else:
            self.flat = models.FlatState(self.model.cpu())
            self._layout = self.flat.layout
            self._initial = self.flat.vector.copy()
        self._other_initial = [(m, name, b.detach().clone())
                               for m, name, b in self._layout.other_buffers]
        self._pending = None  # last gradient(): nodes, updated buffers, buffers as given
        self._rng_devices = [self.device] if self.device.type == "cuda" else []
        on = self.device.type != "cpu" if device_tokens is None else bool(device_tokens)
        self.token_device = str(self.device) if on else None  # read by the MPI back end
        self._generators = [torch.default_generator]
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self._generators.append(torch.cuda.default_generators[index])

        # -- what the engine reads
        if self.classification:
            self.metric, self.higher_is_better = "accuracy", True
            self.validation = "validation accuracy"
        else:
            self.metric, self.higher_is_better = "loss", False
            self.validation = "validation loss"
        self.validation_higher_is_better = self.higher_is_better
        _check_first_batch(self)

    # ---------------------------------------------------------------- sizes
    @property
    def dim(self) -> int:
        """Token length: parameters plus floating buffers."""
        return len(self._initial)

    @property
    def n_train(self) -> int:
        """Training samples over all nodes (validation excluded)."""
        return self._n_train

    @property
    def n_test(self) -> int:
        """Test samples (the whole set, also when only a slice is kept)."""
        return self._sizes["test"]

    @property
    def n_validation(self) -> int:
        return self._sizes["validation"]

    def data_bytes(self) -> dict:
        """Bytes of the samples this problem holds in memory, by set ("train", "test",
        "validation"); a memory map's file is not counted, the index into it is."""
        return {"train": int(self._train.nbytes),
                **{split: int(data.nbytes) for split, data in self._sets.items()}}

    def held_slice(self, split: str = "test") -> tuple:
        """The ``(lo, hi)`` samples of a set this problem keeps (all, unless
        ``evaluation_part``)."""
        self._split(split)
        return self._held[split]

    def initial(self) -> np.ndarray:
        """The initial token (a copy): the model's state as built."""
        return self._initial.copy()

    # ---------------------------------------------------------------- training
    def batch(self, node: int, t: int) -> np.ndarray:
        """Training-sample indices of ``node``'s mini-batch in round ``t``: keyed by
        (seed, node, t), drawn with replacement from the node's share."""
        return self.parts[node][self._draw(node, t)]

    def _draw(self, node: int, t: int) -> np.ndarray:
        gen = rng.scratch_generator(self.seed, rng.STREAM_BATCH, t, node)
        return gen.integers(0, len(self.parts[node]), size=self.batch_size)

    def gradient(self, nodes, x: np.ndarray, t: int, out: np.ndarray | None = None) -> np.ndarray:
        """Mini-batch gradients at the rows of ``x``, one row after another (``train()``
        mode). Row r: node ``nodes[r]``'s batch of round ``t`` (:meth:`batch`); buffer
        slots get zero gradient, and the buffers the forward pass updated are kept for
        :meth:`after_step`. torch's generator is seeded from (seed, node, t) before each
        row's pass (random layers such as dropout draw the same numbers in every
        back end) and restored afterwards."""
        import torch

        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        if x.ndim != 2 or x.shape != (len(nodes), self.dim):
            raise ValueError(f"gradient: x must have shape ({len(nodes)}, {self.dim}) for "
                             f"{len(nodes)} nodes, got {x.shape}")
        out = np.zeros_like(x) if out is None else out
        pending = np.empty((len(nodes), self.n_buffers), np.float32) if self.n_buffers else None
        self.model.train()
        with torch.random.fork_rng(devices=self._rng_devices):  # the caller's RNG untouched
            for r, node in enumerate(nodes):
                node = int(node)
                positions = self._local_positions(node)
                xb, yb = self._train.take(positions[self._draw(node, t)])
                self._load(x[r])
                seed = rng.key(self.seed, rng.STREAM_TORCH, t, node)
                for gen in self._generators:  # (torch.manual_seed: ~0.2 ms, every backend)
                    gen.manual_seed(seed)
                out[r, :self.n_params] = self._loss_and_grad(xb, yb)
                out[r, self.n_params:] = 0.0
                if pending is not None:
                    pending[r] = self._buffer_values()
        if pending is not None:  # with the rows' buffers as given, to check after_step's y
            self._pending = (nodes.copy(), pending, x[:, self.n_params:].copy())
        return out

    def after_step(self, nodes, y: np.ndarray) -> None:
        """Write the floating buffers updated by the last :meth:`gradient` call (same
        nodes, same row order) into the buffer slots of the stepped rows ``y``. Call it
        once after each gradient call, before the next one (concurrent runs, e.g.
        Algorithm 2's, each step and call it in turn). Nothing to do for a model without
        floating buffers."""
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

    def _local_positions(self, node: int) -> np.ndarray:
        if not 0 <= node < self.n:
            raise ValueError(f"node {node} is out of range for {self.n} nodes")
        positions = self._local_parts[node]
        if positions is None:
            raise ValueError(f"node {node} is not among this problem's local_nodes "
                             f"{list(self.local_nodes)}; its data was not kept")
        return positions

    def _restore_other_buffers(self) -> None:
        for module, name, value in self._other_initial:
            module._buffers[name].copy_(value)

    def _load(self, row: np.ndarray) -> None:
        """Put a token vector into the model."""
        import torch

        if self.flat is not None:
            np.copyto(self.flat.vector, row)
        else:
            dev = torch.from_numpy(np.ascontiguousarray(row)).to(self.device)
            off = 0
            with torch.no_grad():
                for t in self._layout.tensors():
                    n = t.numel()
                    t.copy_(dev[off:off + n].view_as(t))
                    off += n
        self._restore_other_buffers()

    def _buffer_values(self) -> np.ndarray:
        import torch

        if self.flat is not None:
            return self.flat.buffers
        return torch.cat([b.detach().reshape(-1) for _, _, b in self._layout.buffers]).cpu().numpy()

    def _loss_and_grad(self, xb, yb) -> np.ndarray:
        import torch
        from torch.nn import functional as F

        loss_fn = F.cross_entropy if self.loss is None else self.loss
        if self.flat is not None:
            self.flat.zero_grad()
            loss_fn(self.model(xb), yb).backward()
            return self.flat.grad_vector()
        self.model.zero_grad(set_to_none=False)
        loss_fn(self.model(xb.to(self.device)), yb.to(self.device)).backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._layout.params]
        return torch.nn.utils.parameters_to_vector(grads).cpu().numpy()

    # ---------------------------------------------------------------- evaluation
    @staticmethod
    def average(x: np.ndarray) -> np.ndarray:
        """Mean of the token rows, summed in token order in float64, rounded once."""
        return (np.add.reduce(x.astype(np.float64), axis=0) / len(x)).astype(np.float32)

    def evaluation_sums(self, vector: np.ndarray, lo: int = 0, hi: int | None = None,
                        split: str = "test") -> np.ndarray:
        """Per-chunk sums of the model ``vector`` on samples ``[lo, hi)`` of a set.

        Parameters
        ----------
        vector : ndarray, shape (dim,)
            A token (usually the average of the tokens, :meth:`average`).
        lo, hi : int
            The slice; ``lo`` a multiple of ``eval_batch_size``, ``hi`` one too or the
            set's size (default: the whole set). :func:`chunk_slices` makes such slices.
        split : {"test", "validation"}
            The set evaluated (:meth:`evaluate` uses "test").

        Returns
        -------
        ndarray, shape (chunks, 3), float64
            One row ``(loss sum, correct predictions, samples)`` per chunk of
            ``eval_batch_size`` samples, in order. Rows of disjoint chunk-aligned slices
            concatenated in slice order equal the rows of the whole set bit for bit.
        """
        import torch
        from torch.nn import functional as F

        data = self._split(split)
        n, size = self._sizes[split], self.eval_batch_size
        hi = n if hi is None else int(hi)
        lo = int(lo)
        if not (0 <= lo <= hi <= n) or (lo % size and lo != n) or (hi % size and hi != n):
            raise ValueError(f"evaluation slice [{lo}, {hi}) of {n} samples must lie within "
                             f"the set, with bounds multiples of {size} (or the set's end)")
        start, stop = self._held[split]
        if lo < hi and not (start <= lo and hi <= stop):
            raise ValueError(f"evaluation slice [{lo}, {hi}) of the {split} set is not held "
                             f"here (this problem keeps [{start}, {stop}), evaluation_part="
                             f"{self.evaluation_part}; (0, 1) keeps the whole set)")
        self._load(vector)
        self.model.eval()
        rows = []
        with torch.no_grad():
            for s in range(lo, hi, size):
                xb, yb = data.span(s - start, min(s + size, hi) - start)
                xb, yb = xb.to(self.device), yb.to(self.device)
                out = self.model(xb)
                if self.loss is None:
                    total = float(F.cross_entropy(out, yb, reduction="sum").double())
                else:
                    total = float(self.loss(out, yb).double()) * len(yb)
                correct = int((out.argmax(1) == yb).sum()) if self.classification else 0
                rows.append((total, correct, len(yb)))
        return np.array(rows, dtype=np.float64).reshape(-1, 3)

    def metrics_from_sums(self, sums: np.ndarray, x: np.ndarray | None = None) -> dict:
        """``loss`` (mean) and, for classification, ``accuracy`` from the chunk rows of
        :meth:`evaluation_sums` (all chunks of the set, in order; added in that order);
        with the token matrix ``x``, also ``consensus`` (mean squared distance of the
        tokens to their average)."""
        sums = np.asarray(sums, dtype=np.float64).reshape(-1, 3)
        count = int(sum(int(c) for c in sums[:, 2]))
        if count == 0:
            m = {"loss": float("nan")}
            if self.classification:
                m["accuracy"] = float("nan")
        else:
            total = 0.0
            for value in sums[:, 0].tolist():
                total += value
            m = {"loss": total / count}
            if self.classification:
                m["accuracy"] = int(sum(int(c) for c in sums[:, 1])) / count
        if x is not None:
            mean = self.average(x)
            centred = x.astype(np.float64) - mean.astype(np.float64)
            m["consensus"] = math.fsum(np.sum(centred * centred, axis=1).tolist()) / len(x)
        return m

    def evaluate(self, x: np.ndarray) -> dict:
        """Test ``loss``/``accuracy`` of the averaged token model (``eval()`` mode), and
        the ``consensus`` distance of the tokens."""
        return self.metrics_from_sums(self.evaluation_sums(self.average(x)), x)

    def validate(self, x: np.ndarray) -> float:
        """Validation accuracy (classification; else loss) of the averaged model:
        Algorithm 2's selection, never on the test set."""
        if self._val is None:
            raise ValueError("validate() needs a validation set: build the TorchProblem with "
                             "validation= or validation_fraction > 0")
        sums = self.evaluation_sums(self.average(x), split="validation")
        return self.metrics_from_sums(sums)[self.metric]

    def _split(self, split: str):
        if split == "test":
            return self._test
        if split == "validation":
            if self._val is None:
                raise ValueError("this problem has no validation set")
            return self._val
        raise ValueError(f"split must be 'test' or 'validation', got {split!r}")

    # ---------------------------------------------------------------- engine facts
    def reached(self, metrics: dict, target: float) -> bool:
        value = metrics[self.metric]
        return value >= target if self.higher_is_better else value <= target

    def finite(self, metrics: dict) -> bool:
        return math.isfinite(metrics["loss"])

    def describe(self) -> dict:
        """Facts for config.json: per-node class histogram (classification), training
        samples, parameters, device."""
        facts = {} if self.class_histogram is None else {"class_histogram": self.class_histogram}
        return {**facts, "n_train": self.n_train, "n_params": self.n_params,
                "device": str(self.device)}

    def __repr__(self) -> str:
        return (f"TorchProblem({type(self.model).__name__}, nodes={self.n}, dim={self.dim}, "
                f"n_train={self.n_train}, device={self.device})")


# ------------------------------------------------------------------------ checks
def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _build(model, seed: int):
    """The problem's own copy of the module, or the module a builder returns (built under
    a fixed torch seed, the global generator restored)."""
    import torch

    if isinstance(model, torch.nn.Module):
        return copy.deepcopy(model)
    if callable(model):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            built = model()
        if not isinstance(built, torch.nn.Module):
            raise TypeError(f"the model builder returned {type(built).__name__}, not a "
                            "torch.nn.Module")
        return built
    raise TypeError(f"model must be a torch.nn.Module or a function returning one, got "
                    f"{type(model).__name__}")


def _check_partition(partition, nodes: int, n_train: int) -> list:
    parts = list(partition)
    if len(parts) != nodes:
        raise ValueError(f"partition has {len(parts)} index lists for {nodes} nodes")
    out = []
    for i, p in enumerate(parts):
        a = np.asarray(p)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise ValueError(f"partition[{i}] must be a flat list of integer indices")
        a = a.astype(np.int64)
        if a.size == 0:
            raise ValueError(f"partition[{i}] is empty: every node needs at least one sample")
        if a.min() < 0 or a.max() >= n_train:
            bad = int(a[(a < 0) | (a >= n_train)][0])
            raise ValueError(f"partition[{i}] holds index {bad}, outside the {n_train} "
                             "training samples")
        out.append(a)
    return out


def _check_local_nodes(local_nodes, nodes: int):
    if local_nodes is None:
        return tuple(range(nodes))
    local = tuple(int(i) for i in np.atleast_1d(np.asarray(local_nodes)))
    bad = [i for i in local if not 0 <= i < nodes]
    if bad or not local:
        raise ValueError(f"local_nodes must name nodes in 0..{nodes - 1}, got {list(local_nodes)}")
    return local


def _check_part(part):
    if part is None:
        return None
    try:
        index, parts = (int(v) for v in part)
    except (TypeError, ValueError):
        raise ValueError(f"evaluation_part must be a pair (part, parts), got {part!r}") from None
    if parts < 1 or not 0 <= index < parts:
        raise ValueError(f"evaluation_part needs 0 <= part < parts, got {part!r}")
    return (index, parts)


def _resolve_device(device) -> str:
    if str(device) == "auto":
        from .device import pick_device

        return pick_device("auto", 0)
    return str(device)


# ----------------------------------------------------------------------------- issue 21
# Inputs torch would only reject deep inside a round, with a traceback: one-line
# UsageErrors at construction instead (mpi_teleport/contract.py checks the Problem side).
def _usable_device(device) -> str:
    """``device`` resolved, or UsageError: not a torch device, or CUDA without a GPU."""
    import torch

    from ..errors import UsageError

    name = _resolve_device(device)
    try:
        kind = torch.device(name).type
    except (RuntimeError, TypeError, ValueError):
        raise UsageError(f"device={device!r} is not a torch device: use 'cpu', 'cuda', "
                         f"'cuda:N' or 'auto'") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device={device!r} but torch sees no CUDA device "
                         f"(torch.cuda.is_available() is False): use device='cpu' or 'auto'")
    return name


def _refuse_negative_labels(labels, split: str) -> None:
    if labels is not None and len(labels) and int(np.min(labels)) < 0:
        from ..errors import UsageError

        raise UsageError(f"{split} labels must be class indices >= 0; found "
                         f"{int(np.min(labels))}")


def _check_first_batch(problem) -> None:
    """Run the model on the first samples of each set (eval mode, no gradient: nothing
    changes): inputs it cannot take, and class labels outside its outputs, are one line."""
    import torch

    from ..errors import UsageError

    model, training = problem.model, problem.model.training
    model.eval()
    try:
        for split, data in (("train", problem._train), *problem._sets.items()):
            if data is None or len(data) == 0:
                continue
            xb, _ = data.take(np.arange(min(2, len(data))))
            try:
                with torch.no_grad():
                    out = model(xb.to(problem.device))
            except Exception as exc:  # noqa: BLE001  (the model rejects these inputs)
                raise UsageError(f"{split} set: the model cannot take its inputs of shape "
                                 f"{tuple(xb.shape[1:])} per sample ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
            if problem.classification and problem.loss is None and out.ndim == 2:
                labels = data.labels()
                _refuse_negative_labels(labels, split)
                top, classes = int(np.max(labels)), int(out.shape[1])
                if top >= classes:
                    raise UsageError(f"{split} labels must be class indices below the model's "
                                     f"{classes} outputs; found label {top}")
    finally:
        model.train(training)
