"""A torch model and the token vector it is trained as: loading a token into the model,
reading its gradient and updated buffers back, and getting a trained module out.

A token is ``[trainable parameters | floating buffers]`` (:class:`.models.StateLayout`):
frozen parameters (``requires_grad=False``) stay as built, identical in every process,
and integer buffers are restored to their built values before every forward pass.
On the CPU the model's tensors are zero-copy views into one vector
(:class:`.models.FlatState`); on a GPU (``staged``) the token is copied in and out.
"""
from __future__ import annotations

import copy

import numpy as np

__all__ = ["ModelState", "load_into"]


class ModelState:
    """The problem's model bound to the token layout."""

    def __init__(self, model, device, staged: bool):
        import torch

        from . import models

        layout = models.StateLayout(model)
        bad = [t.dtype for t in layout.tensors() if t.dtype != torch.float32]
        if bad:
            raise TypeError(f"the model must be float32 (tokens are float32 vectors), found "
                            f"{bad[0]} tensors; convert it with model.float()")
        self.device = device
        self.n_params, self.n_buffers = layout.n_params, layout.n_buffers
        if staged:  # token vector on the host, model on the device; copies between
            self.flat = None
            self.initial = np.concatenate(
                [t.detach().reshape(-1).cpu().numpy() for t in layout.tensors()]
                or [np.zeros(0, np.float32)]).astype(np.float32)
            model.to(device)
            self.layout = models.StateLayout(model)  # the moved tensors
        else:
            self.flat = models.FlatState(model.cpu())
            self.layout = self.flat.layout
            self.initial = self.flat.vector.copy()
        self.model = model
        self._other_initial = [(m, name, b.detach().clone())
                               for m, name, b in self.layout.other_buffers]

    def load(self, row: np.ndarray) -> None:
        """Put a token vector into the model (integer buffers back to their built values)."""
        if self.flat is not None:
            np.copyto(self.flat.vector, row)
        else:
            _copy_in(self.layout, row, self.device)
        for module, name, value in self._other_initial:
            module._buffers[name].copy_(value)

    def buffer_values(self) -> np.ndarray:
        import torch

        if self.flat is not None:
            return self.flat.buffers
        return torch.cat([b.detach().reshape(-1) for _, _, b in self.layout.buffers]).cpu().numpy()

    def zero_grad(self) -> None:
        if self.flat is not None:
            self.flat.zero_grad()
        else:
            self.model.zero_grad(set_to_none=False)

    def grad(self) -> np.ndarray:
        """The trainable parameters' gradient, packed in token order (float32)."""
        import torch

        if self.flat is not None:
            return self.flat.grad_vector()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.layout.params]
        return torch.nn.utils.parameters_to_vector(grads).cpu().numpy()

    def module(self, x: np.ndarray):
        """A new CPU ``nn.Module``: the model with token ``x`` loaded (independent of the
        problem: its tensors are its own)."""
        model = copy.deepcopy(self.model).cpu()
        for p in model.parameters():  # (FlatState's views were deep-copied into new storage)
            p.grad = None
        load_into(model, x)
        for (m, name, value), (_, _, b) in zip(self._other_initial, _other(model)):
            b.copy_(value.cpu())
        return model


def _other(model):
    from . import models

    return models.StateLayout(model).other_buffers


def _copy_in(layout, x: np.ndarray, device) -> None:
    import torch

    x = np.asarray(x, dtype=np.float32).reshape(-1)
    if len(x) != layout.size:
        raise ValueError(f"the vector has {len(x)} values; this model's token has "
                         f"{layout.size} ({layout.n_params} trainable parameters + "
                         f"{layout.n_buffers} floating buffer values)")
    dev = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    off = 0
    with torch.no_grad():
        for t in layout.tensors():
            n = t.numel()
            t.copy_(dev[off:off + n].view_as(t))
            off += n


def load_into(model, x: np.ndarray):
    """Copy a token ``x`` (e.g. ``Result.x``) into ``model``, a module built like the
    problem's (same class, same frozen parameters): its trainable parameters, then its
    floating buffers, in the token order; frozen parameters and integer buffers are left
    as they are. Returns ``model``."""
    from . import models

    layout = models.StateLayout(model)
    device = layout.tensors()[0].device if layout.tensors() else "cpu"
    _copy_in(layout, x, device)
    return model
