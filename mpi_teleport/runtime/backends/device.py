"""Tokens held as torch tensors on the rank's compute device: the momentum step and the
gossip sum run there (MpiBackend with ``token_device``).

The state has the fields of :class:`~mpi_teleport.runtime.backends.tokens.TokenState` (``x``, ``y``,
``v``, ``v_in``, ``inbox``, ``work``), each a numpy array the transport sends and
receives ("wire"), paired with a tensor on the device:

* on the CPU the tensor *is* the wire's memory (``torch.from_numpy``): no copy at all,
  and the arithmetic is torch's CPU kernels;
* on a GPU the wire is a pinned host buffer and the tensor lives on the GPU. Between
  rounds the wire is authoritative: :func:`local_step` uploads x (and v), computes y
  (and v) on the GPU and downloads them for the sends; :func:`weighted_sum` uploads the
  received inputs, sums on the GPU and downloads x. (The copies are plain, not
  overlapped with communication, and the gradient still comes back through the host.
  Checked on an H200: bit for bit the host path's numbers; the manual's
  Performance page, "GPU".)

The arithmetic is that of :mod:`mpi_teleport.core.algorithms` operation for operation (each
product and sum rounded to the token's dtype, the weights rounded to it once, inputs in
the given order), so on the CPU the numbers equal the host path's bit for bit
(tests/test_device_tokens.py).
"""
from __future__ import annotations

from typing import cast

import numpy as np
import torch

from ...core.algorithms import Nesterov
from ...core.contract import landed


class DeviceTokenState:
    """The token a rank holds (model x, momentum v, receive buffers, work space) as
    wire arrays paired with tensors on ``device``."""

    def __init__(self, d: int, momentum: bool, dtype=np.float32, device="cpu"):
        self.device = torch.device(device)
        self.staged = self.device.type != "cpu"
        self.dtype = np.dtype(dtype)
        self._pairs: dict[int, tuple] = {}
        self.x = self._buffer(d)
        self.y = self._buffer(d)
        self.v = self._buffer(d) if momentum else None
        self.v_in = self._buffer(d) if momentum else None
        self.inbox: list[np.ndarray] = []
        self.work = self._buffer(d)  # one product of the gossip sum

    def _buffer(self, d: int) -> np.ndarray:
        torch_dtype = torch.from_numpy(np.zeros(0, self.dtype)).dtype
        if not self.staged:
            tensor = torch.zeros(d, dtype=torch_dtype)
            wire = tensor.numpy()
        else:
            wire = torch.zeros(d, dtype=torch_dtype).pin_memory().numpy()
            tensor = torch.zeros(d, dtype=torch_dtype, device=self.device)
        self._pairs[id(wire)] = (wire, tensor)
        return wire

    def tensor(self, wire: np.ndarray) -> torch.Tensor:
        """The device tensor paired with a wire array of this state."""
        pair = self._pairs.get(id(wire))
        if pair is None or pair[0] is not wire:
            raise ValueError("not a buffer of this token state")
        return pair[1]

    def upload(self, wire: np.ndarray) -> torch.Tensor:
        """The wire's values on the device (a no-op on the CPU)."""
        t = self.tensor(wire)
        if self.staged:
            t.copy_(torch.from_numpy(wire), non_blocking=True)
        return t

    def download(self, wire: np.ndarray) -> None:
        """The device tensor's values into the wire (a no-op on the CPU)."""
        if self.staged:
            torch.from_numpy(wire).copy_(self.tensor(wire))

    def inboxes(self, count: int) -> list[np.ndarray]:
        while len(self.inbox) < count:
            self.inbox.append(self._buffer(len(self.x)))
        return self.inbox


def local_step(problem, node: int, s: DeviceTokenState, t: int, lr: float,
               momentum: float) -> np.ndarray:
    """s.y = s.x - lr * g, heavy-ball when momentum > 0 (s.v updated), the operations of
    :func:`mpi_teleport.core.algorithms.local_step` done by torch on the device. The gradient
    is the problem's (numpy, written into s.y's wire); ``after_step`` sees y as there."""
    x = s.upload(s.x)
    out = s.y[None]
    g = problem.gradient([node], s.x[None], t, out=out)
    if g is not out:  # returned, not written: checked and copied into s.y
        landed(problem, g, out, s.x[None])
    g = s.upload(s.y)
    if momentum > 0:
        nesterov = isinstance(momentum, Nesterov)
        momentum = float(momentum) if nesterov else momentum
        sv = cast(np.ndarray, s.v)  # (momentum > 0: the state has v)
        v = s.upload(sv)
        v.mul_(momentum)
        v.add_(g)
        if nesterov:  # g + mu v, each product rounded (as the host)
            g.add_(torch.mul(v, momentum))
            g.mul_(lr)
        else:
            torch.mul(v, lr, out=g)
        s.download(sv)
    else:
        g.mul_(lr)
    torch.sub(x, g, out=g)
    s.download(s.y)
    after_step = getattr(problem, "after_step", None)
    if after_step is not None:
        after_step([node], s.y[None])  # (host values; uploaded with y at the next use)
    return s.y


def weighted_sum(weights, inputs, s: DeviceTokenState) -> np.ndarray:
    """s.x = sum_k weights[k] * inputs[k] in the given order, on the device: the
    weights rounded to the token's dtype once, each product and partial sum rounded to
    it, as :func:`mpi_teleport.core.algorithms.weighted_sum`. ``inputs`` are wires of s."""
    weights = np.asarray(weights, dtype=s.dtype)
    acc, tmp = s.tensor(s.x), s.tensor(s.work)
    torch.mul(s.upload(inputs[0]), float(weights[0]), out=acc)
    for w, wire in zip(weights[1:], inputs[1:]):
        torch.mul(s.upload(wire), float(w), out=tmp)
        acc.add_(tmp)
    s.download(s.x)
    return s.x
