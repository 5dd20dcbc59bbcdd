"""The samples a :class:`~.torch_problem.TorchProblem` trains and evaluates on.

A data set is given as a pair ``(inputs, targets)`` of arrays/tensors or as a map-style
``torch.utils.data.Dataset``; :func:`samples` wraps either in an object with one
interface (``take(idx)`` -> ``(inputs, targets)`` tensors, ``span``, ``labels``,
``subset``, ``keep``, ``nbytes``), so the problem never asks which it got.

A Dataset's items may be

* ``(input, target)`` pairs;
* tuples of several inputs and a target, ``(x1, x2, ..., target)``: the model is called
  as ``model(x1, x2, ...)``;
* dicts with a ``"target"``, ``"targets"``, ``"label"``, ``"labels"`` or ``"y"`` entry:
  the model is called with the other entries as keyword arguments;
* anything else, given ``collate_fn(items) -> (inputs, targets)`` (variable-length text:
  pad in it), ``inputs`` a tensor, a tuple of tensors or a dict of tensors.

torch is imported only inside the functions (importing this module does not).
"""
from __future__ import annotations

import numpy as np

__all__ = ["samples", "batch_tensor", "as_array", "to_device", "call_model"]

TARGET_KEYS = ("target", "targets", "label", "labels", "y")


def batch_tensor(value, name: str):
    """A batch as a tensor with the dtypes tokens are trained with: floating -> float32,
    integer/boolean -> int64 (class labels, token ids)."""
    import torch

    t = torch.as_tensor(value)
    if t.is_floating_point():
        return t if t.dtype == torch.float32 else t.float()
    if t.dtype in (torch.complex64, torch.complex128):
        raise TypeError(f"{name}: complex data is not supported")
    return t if t.dtype == torch.int64 else t.long()


def _structure(value, name: str):
    """batch_tensor over a tensor, a tuple/list of them or a dict of them."""
    if isinstance(value, dict):
        return {k: _structure(v, name) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_structure(v, name) for v in value)
    return aligned(batch_tensor(value, name))


# Where every batch starts in memory, in bytes: as torch's own CPU allocations are
# (c10's alignment, one AVX-512 vector).
ALIGNMENT = 64


def aligned(tensor):
    """``tensor`` starting at an address aligned to :data:`ALIGNMENT` bytes: itself when it
    does, else a copy (torch allocates aligned). A CPU kernel's vectorised loop splits a
    buffer by its address, so a forward pass on the same numbers at another address can
    round differently: a test chunk read as a view into the whole set (the simulator)
    and from a rank's own copy of its slice (MPI) gave evaluation losses that differed in
    their last bits. Aligned, every back end computes the same bits."""
    import torch

    if (tensor.device.type != "cpu" or tensor.layout is not torch.strided  # (sparse: as given)
            or tensor.data_ptr() % ALIGNMENT == 0):
        return tensor
    return tensor.clone()


def to_device(value, device):
    """``value`` (a tensor, tuple or dict of tensors) on ``device``; a copy to another
    device in the standard (row-major) layout. A batch taken from the whole data set (the
    simulator) and one from a rank's share hold the same numbers with different strides
    where a dimension has size 1 (one channel: (64, 1, 8, 1) against (64, 8, 8, 1)); the
    first reads as channels-last, and on a GPU the two then ran different convolution
    kernels, so the simulator and MPI differed in their last bits. (On the device it is
    already on, a tensor is returned as it is: the CPU's numbers do not change.)"""
    import torch

    target = torch.device(device)

    def moved(tensor):
        if tensor.device == target or (target.index is None and tensor.device.type == target.type):
            return tensor
        return tensor.to(target, memory_format=torch.contiguous_format)

    if isinstance(value, dict):
        return {k: moved(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(moved(v) for v in value)
    return moved(value)


def call_model(model, inputs):
    """``model(x)``, ``model(*inputs)`` for a tuple, ``model(**inputs)`` for a dict."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


def as_array(value, name: str) -> np.ndarray:
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


class ArraySamples:
    """Samples as two numpy arrays, inputs ``x`` and targets ``y`` (same length)."""

    reads_items = False  # (indexing arrays runs no user code: nothing draws random numbers)

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def take(self, idx):
        import torch

        return (aligned(torch.from_numpy(np.ascontiguousarray(self.x[idx]))),
                aligned(torch.from_numpy(np.ascontiguousarray(self.y[idx]))))

    def span(self, lo: int, hi: int):
        return self.take(slice(lo, hi))

    def labels(self) -> np.ndarray:
        return self.y

    def subset(self, idx) -> "ArraySamples":
        """These samples; rows read lazily stay lazy (a memory-mapped set is not read)."""
        select = getattr(self.x, "select", None)
        return ArraySamples(self.x[idx] if select is None else select(idx), self.y[idx])

    def keep(self, idx) -> "ArraySamples":
        """These samples, held in memory (nothing else of the set is referenced)."""
        keep = getattr(self.x, "keep", None)
        x = self.x[idx] if keep is None else keep(idx)
        if isinstance(x, np.ndarray) and isinstance(idx, slice):
            x = x.copy()  # (a slice of an array is a view of all of it)
        return ArraySamples(x, np.array(self.y[idx]))

    @property
    def nbytes(self) -> int:
        return int(self.x.nbytes) + int(self.y.nbytes)


class DatasetSamples:
    """Samples of a map-style ``torch.utils.data.Dataset``, read lazily through an index
    (only the items asked for are read); items as the module docstring says."""

    reads_items = True  # (a transform may draw from the global generators)

    def __init__(self, dataset, index: np.ndarray | None = None, name: str = "dataset",
                 collate_fn=None):
        self.dataset, self.name, self.collate_fn = dataset, name, collate_fn
        self.index = np.arange(len(dataset), dtype=np.int64) if index is None else index

    def __len__(self) -> int:
        return len(self.index)

    def _item(self, i: int):
        return self.dataset[int(self.index[i])]

    def _split(self, item):
        """(inputs, target) of one item."""
        if isinstance(item, dict):
            key = next((k for k in TARGET_KEYS if k in item), None)
            if key is None:
                raise TypeError(f"{self.name}: dict items need a target entry (one of "
                                f"{', '.join(TARGET_KEYS)}), or give collate_fn=, got keys "
                                f"{sorted(item)}")
            return {k: v for k, v in item.items() if k != key}, item[key]
        if isinstance(item, (tuple, list)) and len(item) >= 2:
            return (item[0] if len(item) == 2 else tuple(item[:-1])), item[-1]
        raise TypeError(f"{self.name}: items must be (input, target) pairs, (inputs..., "
                        f"target) tuples or dicts with a target; got {type(item).__name__} "
                        "(give collate_fn= to batch other items)")

    def take(self, idx):
        from torch.utils.data import default_collate

        items = [self._item(i) for i in np.asarray(idx).reshape(-1)]
        if self.collate_fn is not None:
            batch = self.collate_fn(items)
            if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
                raise TypeError(f"{self.name}: collate_fn must return (inputs, targets), got "
                                f"{type(batch).__name__}")
            xb, yb = batch
        else:
            pairs = [self._split(item) for item in items]
            xb = default_collate([p[0] for p in pairs])
            yb = default_collate([p[1] for p in pairs])
        if isinstance(xb, list):
            xb = tuple(xb)
        return _structure(xb, self.name), aligned(batch_tensor(yb, self.name))

    def span(self, lo: int, hi: int):
        return self.take(np.arange(lo, hi))

    def labels(self) -> np.ndarray:
        """Every target: the data set's ``targets`` attribute when it has one of the
        right length (torchvision's data sets), else read item by item."""
        targets = getattr(self.dataset, "targets", None)
        if targets is not None and len(targets) == len(self.dataset):
            return as_array(targets, self.name)[self.index]
        if self.collate_fn is not None:
            return as_array(self.take(np.arange(len(self)))[1], self.name)
        return as_array(np.stack([batch_tensor(self._split(self._item(i))[1], self.name).numpy()
                                  for i in range(len(self))]), self.name)

    def subset(self, idx) -> "DatasetSamples":
        return DatasetSamples(self.dataset, self.index[idx], self.name, self.collate_fn)

    keep = subset  # (the data set reads items on demand: only the index is held)

    @property
    def nbytes(self) -> int:
        return int(self.index.nbytes)


def samples(data, name: str, collate_fn=None):
    """(X, y) arrays/tensors or a map-style Dataset -> a samples object."""
    import torch

    if isinstance(data, torch.utils.data.Dataset):
        if not hasattr(data, "__getitem__") or not hasattr(data, "__len__"):
            raise TypeError(f"{name}: only map-style data sets (with __len__ and "
                            "__getitem__) are supported")
        if len(data) == 0:
            raise ValueError(f"{name}: the data set is empty")
        return DatasetSamples(data, name=name, collate_fn=collate_fn)
    if collate_fn is not None:
        raise ValueError(f"{name}: collate_fn applies to a torch Dataset; (inputs, targets) "
                         "arrays are batched by indexing")
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x = data[0] if reads_rows(data[0]) else as_array(data[0], f"{name} inputs")
        y = as_array(data[1], f"{name} targets")
        if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
            raise ValueError(f"{name}: inputs and targets must have the same length, got "
                             f"{x.shape[:1] or 'a scalar'} and {y.shape[:1] or 'a scalar'}")
        if len(y) == 0:
            raise ValueError(f"{name}: the data set is empty")
        return ArraySamples(x, y)
    raise TypeError(f"{name} must be a pair (inputs, targets) of arrays/tensors or a "
                    f"map-style torch Dataset, got {type(data).__name__}")


def reads_rows(x) -> bool:
    """An array-like that reads float32 rows when indexed and narrows without reading
    (``select``/``keep``, e.g. :class:`.datasets.ImageRows` over a memory map)."""
    return all(hasattr(x, a) for a in ("select", "keep", "shape", "__getitem__", "__len__"))
