"""Optimizers beyond SGD, given as PyTorch users give them, whose state travels with the
token (mpi_teleport/DESIGN.md §2.6).

``optimizer=`` takes ``torch.optim.Adam``, ``torch.optim.AdamW`` or ``torch.optim.SGD`` as
the class, a factory with its keywords (``functools.partial(torch.optim.AdamW, lr=1e-3,
weight_decay=0.05)``, a lambda over the parameters) or an instance a plain script built
(``torch.optim.AdamW(model.parameters(), lr=1e-3)``). Its hyperparameters are read once
(:func:`from_torch`); the package never steps a torch optimizer. SGD becomes the
momentum (heavy-ball or Nesterov) the algorithms already carry (its weight decay:
:class:`SgdDecay`); Adam and AdamW become
:class:`Adam`, a step rule whose per-token state (first and second moments, 2 d values)
travels with the token exactly as momentum does: from holder to holder along the
token's self-edge, never averaged by gossip, kept in place for DSGD's replicas, and
checkpointed with x. The step count is a pure function of the round (every token takes
one step per round: step t + 1 at round t), so a resumed run needs nothing more.

:func:`adam_step` is element-wise in the token's dtype (scalars rounded to it once), so a
rank stepping its one row and the simulator stepping k rows compute the same bits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError

__all__ = ["Adam", "SgdDecay", "from_torch", "adam_step", "decay_gradient"]


@dataclass(frozen=True)
class Adam:
    """Adam (``decoupled=False``: L2 weight decay added to the gradient) or AdamW
    (``decoupled=True``: the parameters shrink by ``lr * weight_decay`` each step), as
    ``torch.optim.Adam``/``AdamW`` compute them. ``trainable``: decay applies to the
    first ``trainable`` entries of a token (a TorchProblem's parameters, not its
    normalisation buffers); None: to all."""

    betas: tuple[float, ...] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    trainable: int | None = None

    slots = 2  # state vectors per token: first and second moments

    @property
    def name(self) -> str:
        return "AdamW" if self.decoupled else "Adam"

    def describe(self) -> str:
        """For manifests and the start-up agreement (trainable slots are the problem's)."""
        return (f"{self.name}(betas=({float(self.betas[0])!r}, {float(self.betas[1])!r}), "
                f"eps={float(self.eps)!r}, weight_decay={float(self.weight_decay)!r})")


@dataclass(frozen=True)
class SgdDecay:
    """``torch.optim.SGD(weight_decay=...)``: ``weight_decay * x`` added to the gradient
    of the first ``trainable`` entries (after any clipping, as torch steps after
    ``clip_grad_norm_``), then SGD with the run's (heavy-ball or Nesterov) momentum."""

    weight_decay: float
    momentum: float = 0.0
    nesterov: bool = False
    trainable: int | None = None

    name = "SGD"

    @property
    def slots(self) -> int:
        return 1 if self.momentum > 0 else 0

    def describe(self) -> str:
        return (f"SGD(momentum={float(self.momentum)!r}, nesterov={self.nesterov}, "
                f"weight_decay={float(self.weight_decay)!r})")


def decay_gradient(g: np.ndarray, x: np.ndarray, weight_decay: float,
                   trainable: int | None) -> None:
    """g += weight_decay * x on the trainable entries (torch's L2 term), in g's dtype."""
    n = g.shape[-1] if trainable is None else min(int(trainable), g.shape[-1])
    g[..., :n] += g.dtype.type(weight_decay) * x[..., :n]


# Elements per pass of :func:`adam_step` (as algorithms.BLOCK): its temporaries stay a
# block long (a few MiB however large the model), and each element's operations are
# those of one pass over the whole vector.
BLOCK = 1 << 18


def adam_step(rule: Adam, g: np.ndarray, x: np.ndarray, v: np.ndarray, lr: float,
              step: int) -> None:
    """y = x - Adam's update, written over ``g`` (the gradient rows, ``out`` of the local
    step); ``v`` (rows of 2 d: first moments, then second moments) updated in place.
    ``step``: the token's step count, 1 at its first step. torch's formulas::

        g += wd x                          (Adam; AdamW instead shrinks x by 1 - lr wd)
        m += (1 - b1) (g - m)              (torch's lerp)
        s = b2 s + (1 - b2) g g
        y = x - (lr / (1 - b1^step)) m / (sqrt(s) / sqrt(1 - b2^step) + eps)
    """
    d = g.shape[-1]
    n = d if rule.trainable is None else min(int(rule.trainable), d)
    for a in range(0, d, BLOCK):
        b = min(a + BLOCK, d)
        _adam_block(rule, g[..., a:b], x[..., a:b], v[..., a:b], v[..., d + a:d + b], lr, step,
                    max(0, min(n, b) - a))


def _adam_block(rule: Adam, g: np.ndarray, x: np.ndarray, m: np.ndarray, s: np.ndarray,
                lr: float, step: int, n: int) -> None:
    """:func:`adam_step` on one block of columns, its first ``n`` trainable."""
    dt = g.dtype.type
    b1, b2 = float(rule.betas[0]), float(rule.betas[1])
    wd = float(rule.weight_decay)
    if wd and not rule.decoupled:
        decay_gradient(g, x, wd, n)
    m += (g - m) * dt(1.0 - b1)
    s *= dt(b2)
    s += (g * g) * dt(1.0 - b2)
    step_size = lr / (1.0 - b1 ** step)
    denom = np.sqrt(s)
    denom /= dt(math.sqrt(1.0 - b2 ** step))
    denom += dt(rule.eps)
    update = m / denom
    update *= dt(step_size)
    if wd and rule.decoupled:
        np.multiply(x[..., :n], dt(1.0 - lr * wd), out=g[..., :n])
        g[..., :n] -= update[..., :n]
        np.subtract(x[..., n:], update[..., n:], out=g[..., n:])
    else:
        np.subtract(x, update, out=g)


def from_torch(optimizer: Any, trainable: int | None = None) -> dict[str, Any]:
    """What ``optimizer=`` (a torch optimizer class, factory or instance) asks for:
    ``{"lr": its lr, "momentum": float, "nesterov": bool, "rule": Adam or None}``, or a
    one-line UsageError for what the package does not run."""
    torch = _torch()
    opt = _instance(optimizer, torch)
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    if any(g != groups[0] for g in groups[1:]):
        raise UsageError(f"optimizer={type(opt).__name__}: its parameter groups differ; a token "
                         "is stepped with one setting (use one group)")
    h = groups[0]
    name = type(opt).__name__
    if h.get("maximize"):
        raise UsageError(f"optimizer={name}(maximize=True) is not supported: minimise the "
                         "negated loss")
    if isinstance(opt, torch.optim.Adam) or isinstance(opt, torch.optim.AdamW):
        if h.get("amsgrad"):
            raise UsageError(f"optimizer={name}(amsgrad=True) is not supported; use "
                             "amsgrad=False")
        decoupled = isinstance(opt, torch.optim.AdamW) or bool(h.get("decoupled_weight_decay"))
        rule: Adam | SgdDecay | None = Adam(tuple(float(b) for b in h["betas"]), float(h["eps"]),
                    float(h["weight_decay"]), decoupled, trainable)
        return {"lr": float(h["lr"]), "momentum": 0.0, "nesterov": False, "rule": rule}
    if type(opt) is torch.optim.SGD:
        if h.get("dampening"):
            raise UsageError("optimizer=SGD(dampening=...) is not supported; use dampening=0")
        momentum, nesterov = float(h["momentum"]), bool(h["nesterov"])
        rule = (SgdDecay(float(h["weight_decay"]), momentum, nesterov, trainable)
                if h.get("weight_decay") else None)
        return {"lr": float(h["lr"]), "momentum": momentum, "nesterov": nesterov, "rule": rule}
    raise UsageError(f"optimizer={name} is not supported: use torch.optim.SGD, Adam or AdamW "
                     "(class, factory or instance)")


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover (the nn extra)
        raise UsageError("optimizer= needs torch (pip install the package's nn extra)") from None
    return torch


def _instance(optimizer: Any, torch: Any) -> Any:
    """The optimizer itself, or the one a class or factory builds over a stand-in parameter
    (only its hyperparameters are read)."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if not callable(optimizer):
        raise UsageError(f"optimizer: expected a torch.optim optimizer (class, factory or "
                         f"instance), got {optimizer!r}")
    try:
        built = optimizer([torch.zeros(1, requires_grad=True)])
    except Exception as exc:  # noqa: BLE001  (the user's factory: say what it did)
        raise UsageError(f"optimizer: calling it with the parameters raised "
                         f"{type(exc).__name__}: {exc}") from None
    if not isinstance(built, torch.optim.Optimizer):
        raise UsageError(f"optimizer: the factory returned {type(built).__name__}, not a "
                         "torch.optim optimizer")
    return built
