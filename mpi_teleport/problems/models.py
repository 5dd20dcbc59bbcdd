"""Neural networks for the classification problems, and their flat float32 state.

Only the torch code paths import this module (torch is imported at top level).

* :class:`LeNet5` (1x28x28, Fashion-MNIST), :class:`LeNetGN` (the authors' Fashion-MNIST
  LeNet, GroupNorm after each pooling), :class:`VGG11` (3x32x32, CIFAR-10, with
  GroupNorm), :class:`DigitsCNN` (1x8x8, scikit-learn digits; tiny and fast on a CPU).
* :func:`build_model` -- deterministic initialisation from a seed, drawn with numpy
  (PCG64), independent of torch's global RNG and of the torch version: the same seed
  gives bit-identical parameters in every process.
* :class:`StateLayout` -- which tensors form a model's flat state (parameters, then
  floating buffers), in one order for every device.
* :class:`FlatState` -- parameters and floating buffers in ONE contiguous float32 numpy
  array; the model's tensors are zero-copy views into it, so a token vector is loaded
  into the model by one copy and never converted. (The SGD/momentum step is the
  runtime's ``algorithms.local_step``, shared by every problem.)

Bit-reproducibility: torch's CPU kernels may split reductions (convolutions, matmuls)
differently for different thread counts, so forward/backward results can differ in the
last bits between a 1-thread and an N-thread process. For the MPI runtime and the
simulator to agree bit for bit, every rank (and the simulator) calls
:func:`configure_torch_threads` (``torch.set_num_threads(1)``) before any torch work.
One rank per core is the intended deployment anyway.
"""
from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "LeNet5",
    "LeNetGN",
    "VGG11",
    "DigitsCNN",
    "MODELS",
    "MODEL_FOR_PROBLEM",
    "build_model",
    "configure_torch_threads",
    "StateLayout",
    "FlatState",
    "loss_and_grad",
    "evaluate",
]

_TAG_INIT = 0x1A17


def configure_torch_threads(num_threads: int = 1, deterministic: bool = True) -> None:
    """Pin torch to ``num_threads`` intra-op threads (1 for bit-reproducibility).

    Also asks for deterministic algorithms (warn-only). Inter-op threads can only be set
    before torch's first parallel work; a failure there is ignored (they do not affect
    the numbers).
    """
    torch.set_num_threads(int(num_threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    if deterministic:
        _deterministic_algorithms()


def _deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` without its import of
    ``torch._inductor.config``: that import (sympy, triton; only ``torch.compile`` reads
    the setting, and the package does not compile) adds about 150 MB to every process."""
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is None:  # (a torch without the private setter: the public call)
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        set_flag(True, warn_only=True)


# ----------------------------------------------------------------------------- models
class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al. 1998) for 1x28x28 inputs: conv5(pad 2)-pool-conv5-pool-120-84-10,
    ReLU activations, max pooling. 61,706 parameters."""

    input_shape = (1, 28, 28)

    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class LeNetGN(nn.Module):
    """The LeNet of the authors' Fashion-MNIST harness (github.com/yukiTakezawa/BaseGraph
    at c89b116, ``model/lenet_fashion.py``), written here from its layer sizes: conv5
    (1 -> 6, no padding) - ReLU - max-pool 2 - GroupNorm(2 groups, 6 channels) - conv5 (6 ->
    16) - ReLU - max-pool 2 - GroupNorm(4 groups, 16 channels) - 256-120-84-10, ReLU.
    GroupNorm has no running statistics, so a token is exactly the parameters. 44,470
    parameters."""

    input_shape = (1, 28, 28)

    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)  # 28 -> 24, pooled to 12
        self.gn1 = nn.GroupNorm(2, 6)
        self.conv2 = nn.Conv2d(6, 16, 5)  # 12 -> 8, pooled to 4
        self.gn2 = nn.GroupNorm(4, 16)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, n_classes)

    def forward(self, x):
        x = self.gn1(F.max_pool2d(F.relu(self.conv1(x)), 2))
        x = self.gn2(F.max_pool2d(F.relu(self.conv2(x)), 2))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class VGG11(nn.Module):
    """VGG-11 (Simonyan & Zisserman 2014, configuration A) for 3x32x32 CIFAR-10 inputs.

    Conv3x3 layers 64-M-128-M-256-256-M-512-512-M-512-512-M, then one linear layer
    512 -> 10 (the usual CIFAR variant). Each convolution is followed by **GroupNorm**
    (32 groups, affine) and ReLU instead of BatchNorm: GroupNorm has no running
    statistics, so a model is fully described by its parameters, behaves identically in
    train and eval mode, and averaging the parameters of several replicas (gossip) is
    well defined -- there are no batch statistics that would go stale under averaging.
    Convolutions have no bias (GroupNorm's shift replaces it). About 9.2 M parameters.
    """

    input_shape = (3, 32, 32)
    cfg: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")

    def __init__(self, n_classes: int = 10, groups: int = 32):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for v in self.cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                v = cast(int, v)  # (a width: every entry but "M")
                layers += [
                    nn.Conv2d(c_in, v, 3, padding=1, bias=False),
                    nn.GroupNorm(min(groups, v), v),
                    nn.ReLU(inplace=True),
                ]
                c_in = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, n_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class DigitsCNN(nn.Module):
    """Small CNN for 1x8x8 digits: conv3x3/2 (16) - conv3x3/2 (32) - linear(128 -> 10),
    ReLU, strided convolutions instead of pooling (fewer kernels: cheaper per step).
    6,090 parameters; a forward/backward on a batch of 32 takes about a millisecond on
    one CPU thread."""

    input_shape = (1, 8, 8)

    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, stride=2, padding=1)  # -> 16x4x4
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)  # -> 32x2x2
        self.fc = nn.Linear(32 * 2 * 2, n_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


MODELS = {"lenet5": LeNet5, "lenet-gn": LeNetGN, "vgg11": VGG11, "digits-cnn": DigitsCNN}
_ALIASES = {"lenet": "lenet5", "lenetgn": "lenet-gn", "lenet_gn": "lenet-gn", "vgg": "vgg11",
            "digits": "digits-cnn", "digitscnn": "digits-cnn"}
MODEL_FOR_PROBLEM = {"fashion-mnist": "lenet5", "cifar10": "vgg11", "digits": "digits-cnn"}


def _init_from_numpy(model: nn.Module, seed: int) -> None:
    """PyTorch's default distributions, drawn from numpy: Conv/Linear weight and bias
    ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (what kaiming_uniform_(a=sqrt(5)) gives);
    GroupNorm weight 1, bias 0. Modules in ``model.modules()`` order."""
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_INIT]))
    done = set()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                bound = 1.0 / math.sqrt(m.weight[0].numel())
                for p in (m.weight, m.bias):
                    if p is not None:
                        draw = gen.uniform(-bound, bound, size=tuple(p.shape))
                        p.copy_(torch.from_numpy(draw.astype(np.float32)))
                        done.add(id(p))
            elif isinstance(m, nn.GroupNorm):
                m.weight.fill_(1.0)
                m.bias.fill_(0.0)
                done.update((id(m.weight), id(m.bias)))
    left = [n for n, p in model.named_parameters() if id(p) not in done]
    if left:
        raise TypeError(f"no deterministic initialiser for parameters {left}")


def build_model(name: str, seed: int) -> nn.Module:
    """A float32 CPU model by name (``lenet5``, ``lenet-gn``, ``vgg11``, ``digits-cnn``; aliases
    ``lenet``, ``vgg``, ``digits``), initialised deterministically from ``seed``.

    torch's global RNG is left untouched (module construction runs under
    ``torch.random.fork_rng``; the values then come from numpy).
    """
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    with torch.random.fork_rng(devices=[]):
        model = MODELS[key]()
    _init_from_numpy(model, seed)
    return model.float()


# ------------------------------------------------------------------------- flat state
class StateLayout:
    """Which tensors of a model make up its flat state, and in which order.

    ``params``: the trainable ``model.parameters()`` (each shared tensor once; frozen
    ones, ``requires_grad=False``, are ``frozen`` and not in the vector); ``buffers``: floating
    buffers as ``(module, name, tensor)`` in ``model.modules()`` order (each shared tensor
    once), e.g. BatchNorm's running mean and variance; ``other_buffers``: the remaining
    (integer, boolean) buffers, e.g. BatchNorm's ``num_batches_tracked``, which a float
    vector does not hold. The flat vector is ``[params | buffers]``; :class:`FlatState`
    and a model kept apart on a GPU use this one order, so a token means the same on
    every device.
    """

    def __init__(self, model: nn.Module):
        params = list(model.parameters())
        # Frozen parameters (requires_grad=False) are not trained: they stay as built,
        # identical in every process, and never travel (fine-tuning).
        self.params = [p for p in params if p.requires_grad]
        self.frozen = [p for p in params if not p.requires_grad]
        seen: set[int] = set()
        bufs: list[tuple] = []  # (module, name, buffer)
        other: list[tuple] = []
        for module in model.modules():
            for name, b in module._buffers.items():
                if b is None or id(b) in seen:
                    continue
                seen.add(id(b))
                (bufs if b.is_floating_point() else other).append((module, name, b))
        self.buffers, self.other_buffers = bufs, other
        self.n_params = int(sum(p.numel() for p in self.params))
        self.n_buffers = int(sum(b.numel() for _, _, b in bufs))
        self.size = self.n_params + self.n_buffers

    def tensors(self) -> list:
        """Parameters, then floating buffers: the flat vector's pieces in order."""
        return self.params + [b for _, _, b in self.buffers]


class FlatState:
    """One contiguous float32 numpy buffer holding a model's whole trainable state.

    Layout of ``vector`` (float32, C-contiguous), the token's model part::

        [ parameters (n_params) | floating buffers (n_buffers) ]
          `----------- params_and_buffers: gossip averages it --'

    Every ``param.data`` and floating buffer of the model becomes a zero-copy
    ``torch.from_numpy`` view into ``vector`` (order: ``model.parameters()``, then
    floating buffers in ``model.modules()`` order), so writing into the numpy array
    changes the model and training changes the array. Gradients: every ``param.grad``
    is a view into a separate float32 array ``grad`` (n_params), packed in the same
    order as the parameters; :meth:`grad_vector` returns it (copying in any gradient
    that something re-allocated, e.g. after ``model.zero_grad()`` set it to None).
    Use :meth:`zero_grad` rather than ``model.zero_grad()``.

    Do not call ``model.to()/.float()/.double()`` afterwards: that re-allocates the
    tensors and detaches them from the buffer (:meth:`check` detects it).
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.layout = layout = StateLayout(model)
        self._params, bufs = layout.params, layout.buffers
        for t in layout.tensors():
            if t.dtype != torch.float32 or t.device.type != "cpu":
                raise TypeError("FlatState needs a float32 CPU model")
        self.n_params, self.n_buffers, self.size = layout.n_params, layout.n_buffers, layout.size

        self.vector = np.zeros(self.size, dtype=np.float32)
        self.grad = np.zeros(self.n_params, dtype=np.float32)
        self.params = self.vector[: self.n_params]
        self.buffers = self.vector[self.n_params :]
        self.params_and_buffers = self.vector

        self._slices = []  # (offset, numel, shape) per parameter
        off = 0
        with torch.no_grad():
            for p in self._params:
                n = p.numel()
                self.vector[off : off + n] = p.detach().reshape(-1).numpy()
                p.data = torch.from_numpy(self.vector[off : off + n]).view(p.shape)
                p.grad = torch.from_numpy(self.grad[off : off + n]).view(p.shape)
                self._slices.append((off, n, tuple(p.shape)))
                off += n
            for module, name, b in bufs:
                n = b.numel()
                self.vector[off : off + n] = b.detach().reshape(-1).numpy()
                module._buffers[name] = torch.from_numpy(self.vector[off : off + n]).view(b.shape)
                off += n
        self._buffer_refs = bufs

    # -- gradients
    def _grad_view(self, i: int) -> torch.Tensor:
        off, n, shape = self._slices[i]
        return torch.from_numpy(self.grad[off : off + n]).view(shape)

    def zero_grad(self) -> None:
        """Zero the flat gradient; re-point any ``param.grad`` that is not a view into it."""
        self.grad.fill(0.0)
        ptr0 = self.grad.ctypes.data
        for i, p in enumerate(self._params):
            off = self._slices[i][0]
            if p.grad is None or p.grad.data_ptr() != ptr0 + 4 * off:
                p.grad = self._grad_view(i)

    def grad_vector(self) -> np.ndarray:
        """The gradients packed in parameter order (float32, n_params; the ``grad`` array
        itself, not a copy). A parameter without a gradient counts as zero."""
        ptr0 = self.grad.ctypes.data
        for i, p in enumerate(self._params):
            off, n, _ = self._slices[i]
            if p.grad is None:
                self.grad[off : off + n] = 0.0
                p.grad = self._grad_view(i)
            elif p.grad.data_ptr() != ptr0 + 4 * off:
                self.grad[off : off + n] = p.grad.detach().reshape(-1).numpy()
                p.grad = self._grad_view(i)
        return self.grad

    def check(self) -> bool:
        """True while every parameter and floating buffer still lives in ``vector``."""
        ptr0 = self.vector.ctypes.data
        for (off, n, _), p in zip(self._slices, self._params):
            if p.data.data_ptr() != ptr0 + 4 * off or p.dtype != torch.float32:
                return False
        off = self.n_params
        for module, name, _ in self._buffer_refs:
            b = module._buffers.get(name)
            if b is None or b.data_ptr() != ptr0 + 4 * off:
                return False
            off += b.numel()
        return True

    def __repr__(self) -> str:
        return (
            f"FlatState(n_params={self.n_params}, n_buffers={self.n_buffers}, "
            f"size={self.size}, dtype=float32)"
        )


def loss_and_grad(flat: FlatState, x: np.ndarray, y: np.ndarray, loss_fn=None) -> float:
    """Mean loss of ``flat.model`` on the batch (x float32 NCHW, y int64) and its
    gradient, left in ``flat.grad``. ``loss_fn(output, target)``: default cross-entropy.
    Returns the loss as a Python float."""
    flat.zero_grad()
    out = flat.model(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
    loss = (F.cross_entropy if loss_fn is None else loss_fn)(
        out, torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)))
    loss.backward()
    flat.grad_vector()
    return float(loss.item())


def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 1000,
             device=None) -> dict:
    """Mean cross-entropy ``loss`` and ``accuracy`` of ``model`` on (x, y), in batches of
    ``batch_size`` moved to ``device`` (the model's; None: the CPU); per-batch sums are
    accumulated in float64 in batch order, so the result is reproducible (with one torch
    thread)."""
    n = len(y)
    if n == 0:
        return {"loss": float("nan"), "accuracy": float("nan")}
    total, correct = 0.0, 0
    with torch.no_grad():
        for s in range(0, n, batch_size):
            xb = torch.from_numpy(np.ascontiguousarray(x[s : s + batch_size], dtype=np.float32))
            yb = torch.from_numpy(np.ascontiguousarray(y[s : s + batch_size], dtype=np.int64))
            if device is not None:
                xb, yb = xb.to(device), yb.to(device)
            out = model(xb)
            total += float(F.cross_entropy(out, yb, reduction="sum").double())
            correct += int((out.argmax(1) == yb).sum())
    return {"loss": total / n, "accuracy": correct / n}
