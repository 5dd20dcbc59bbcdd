"""The options of a :class:`~.torch_problem.TorchProblem`, checked: each function takes
what the user gave and returns what the problem uses, or raises one line that says what
was wrong and what to do. Also :class:`TorchSettings`, torch's process-wide settings
scoped to the problem's own work.
"""
from __future__ import annotations

import copy
import os

import numpy as np

from ..errors import UsageError
from .torch_metrics import TASKS

__all__ = ["positive_int", "build", "split_nodes", "regularise", "check_local_nodes", "check_part",
           "resolve_device", "infer_task", "TorchSettings"]


def positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def non_negative(value, name: str) -> float:
    value = float(value)
    if not value >= 0 or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def build(model, seed: int):
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


def regularise(g: np.ndarray, x: np.ndarray, weight_decay: float, clip_norm) -> None:
    """In place on one row's gradient ``g`` at parameters ``x``: add ``weight_decay * x``
    (L2, as ``torch.optim.SGD``), then rescale to ``clip_norm`` when longer (as
    ``clip_grad_norm_``: factor ``clip_norm / (norm + 1e-6)``). Nothing when unused."""
    if weight_decay:
        g += np.float32(weight_decay) * x
    if clip_norm is not None:
        norm = float(np.sqrt(np.dot(g.astype(np.float64), g.astype(np.float64))))
        if norm > clip_norm:
            g *= np.float32(clip_norm / (norm + 1e-6))


def infer_task(task, targets) -> str:
    """``task`` as given, else from a sample of targets: integer scalars -> classification,
    an integer 0/1 matrix -> multilabel, floating -> regression."""
    if task is not None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        if task == "classification" and (targets.is_floating_point() or targets.dim() != 1):
            raise ValueError("task='classification' needs integer class labels, one per sample")
        return task
    if not targets.is_floating_point():
        if targets.dim() == 1:
            return "classification"
        if targets.dim() == 2 and bool(((targets == 0) | (targets == 1)).all()):
            return "multilabel"
    return "regression"


# The concentration of partition="dirichlet" given without alpha (the paper's 0.1).
DIRICHLET_ALPHA = 0.1


def chosen_partition(partition, alpha):
    """The partition a TorchProblem uses: as given; else ``"dirichlet"`` when ``alpha`` is
    given (it means nothing else), else ``"iid"``: a port that names neither trains on
    equal shuffled shares, as a plain script's one data loader does. With an explicit
    ``"iid"`` or index lists, ``alpha`` is unused."""
    if partition is None:
        return "iid" if alpha is None else "dirichlet"
    return partition


def split_nodes(partition, nodes: int, n_train: int, labels, alpha, seed: int) -> list:
    """Node i's training-sample indices: ``"iid"`` (default), ``"dirichlet"`` (over class
    labels; the default when ``alpha`` is given), or the user's index lists (checked)."""
    from . import partitions

    partition = chosen_partition(partition, alpha)
    if isinstance(partition, str) and partition == "dirichlet":
        if labels is None:
            raise ValueError("the Dirichlet partition needs integer class labels; for "
                             "other targets give partition='iid' or index lists, one per node")
        return partitions.dirichlet_partition(labels, nodes,
                                              DIRICHLET_ALPHA if alpha is None else alpha, seed)
    if isinstance(partition, str):
        if partition != "iid":
            raise ValueError(f"partition must be 'dirichlet', 'iid' or index lists (one per "
                             f"node), got {partition!r}")
        return partitions.iid_partition(n_train, nodes, seed)
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


def check_local_nodes(local_nodes, nodes: int):
    if local_nodes is None:
        return tuple(range(nodes))
    try:
        given = np.atleast_1d(np.asarray(local_nodes))
        if isinstance(local_nodes, str) or given.ndim != 1 or given.dtype.kind not in "iu":
            raise TypeError
        local = tuple(int(i) for i in given)
    except (TypeError, ValueError):  # (a word, floats, nested lists: a UsageError, a ValueError)
        raise UsageError(f"local_nodes must be 'auto', None or a list of node numbers in "
                         f"0..{nodes - 1}, got {local_nodes!r}") from None
    bad = [i for i in local if not 0 <= i < nodes]
    if bad or not local:
        raise ValueError(f"local_nodes must name nodes in 0..{nodes - 1}, got {list(local_nodes)}")
    return local


def check_part(part):
    if part is None:
        return None
    try:
        index, parts = (int(v) for v in part)
    except (TypeError, ValueError):
        raise ValueError(f"evaluation_part must be a pair (part, parts), got {part!r}") from None
    if parts < 1 or not 0 <= index < parts:
        raise ValueError(f"evaluation_part needs 0 <= part < parts, got {part!r}")
    return (index, parts)


def resolve_device(device) -> str:
    if str(device) == "auto":
        from .device import pick_device

        return pick_device("auto", 0)
    return str(device)


def host_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def core_share(ranks_on_host: int) -> int:
    """threads="auto": this process's share of its host's cores, at least one."""
    return max(1, host_cores() // max(1, int(ranks_on_host)))


class TorchSettings:
    """torch's intra-op threads and deterministic-algorithms flag, set while the problem
    computes (``with settings:``) and put back on exit; nothing is changed when they
    already are as wanted. ``threads=None`` leaves both alone. ``threads="auto"``: this
    process's share of the host's cores (:func:`core_share`); the run tells it how many
    ranks share the host (:meth:`share_host`; one in the simulator)."""

    def __init__(self, threads):
        if isinstance(threads, str) and threads == "auto":
            self.auto, self.threads = True, core_share(1)
        else:
            if isinstance(threads, str):
                raise ValueError(f"threads must be a positive integer, 'auto' or None, got "
                                 f"{threads!r}")
            self.auto = False
            self.threads = None if threads is None else positive_int(threads, "threads")
        self._undo = None

    def share_host(self, ranks_on_host: int) -> None:
        """Under MPI: ``ranks_on_host`` ranks share this host's cores (threads="auto")."""
        if self.auto:
            self.threads = core_share(ranks_on_host)

    def __enter__(self):
        if self.threads is None:
            return self
        import torch

        undo = []
        before = torch.get_num_threads()
        if before != self.threads:
            torch.set_num_threads(self.threads)
            undo.append(lambda: torch.set_num_threads(before))
        was = (torch.are_deterministic_algorithms_enabled(),
               torch.is_deterministic_algorithms_warn_only_enabled())
        if was != (True, True):
            _deterministic(True, True)
            undo.append(lambda: _deterministic(*was))
        self._undo = undo
        return self

    def __exit__(self, *exc) -> None:
        for step in reversed(self._undo or []):
            step()
        self._undo = None


def _deterministic(on: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms`` without its import of
    ``torch._inductor.config`` (about 150 MB; see :func:`.models._deterministic_algorithms`)."""
    import torch

    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is None:
        torch.use_deterministic_algorithms(on, warn_only=warn_only)
    else:
        set_flag(on, warn_only=warn_only)


def check_token(x0, dim: int) -> np.ndarray:
    """A warm start token: ``dim`` finite float32 numbers (a copy)."""
    x0 = np.asarray(x0, dtype=np.float32).reshape(-1)
    if len(x0) != dim or not np.all(np.isfinite(x0)):
        raise ValueError(f"x0 must be {dim} finite numbers (this model's token: trainable "
                         f"parameters then floating buffers), got {len(x0)}")
    return x0.copy()
