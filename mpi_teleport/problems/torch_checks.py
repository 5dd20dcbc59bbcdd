"""Inputs torch would only reject deep inside a round, with a traceback, refused at
:class:`~mpi_teleport.problems.torch_problem.TorchProblem` construction in one line
(:class:`~mpi_teleport.errors.UsageError`; issue 21): a device that is not a torch device
or CUDA without a GPU, class labels below 0 or beyond the model's outputs, inputs the
model cannot take. The Problem side (shapes and values of ``initial``/``gradient``/
``evaluate``) is :mod:`mpi_teleport.contract`'s.
"""
from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .torch_data import call_model, to_device
from .torch_options import resolve_device


def usable_device(device) -> str:
    """``device`` resolved (``auto``: the accelerator torch knows, else the CPU), or
    UsageError: not a torch device, or an accelerator this process does not have."""
    import torch

    from .device import accelerator

    name = resolve_device(device)
    try:
        kind = torch.device(name).type
    except (RuntimeError, TypeError, ValueError):
        raise UsageError(f"device={device!r} is not a torch device: use 'cpu', 'auto', or an "
                         f"accelerator torch knows ('cuda', 'cuda:N', 'mps', 'xpu', ...)") from None
    if kind == "meta":
        raise UsageError("device='meta' holds no data: use 'cpu', 'auto' or an accelerator")
    found = accelerator()
    if kind != "cpu" and (found is None or found[0] != kind):
        have = f"its accelerator is {found[0]}" if found else "it has no accelerator"
        label = "CUDA" if kind == "cuda" else kind
        raise UsageError(f"device={device!r} but torch sees no {label} device in this process "
                         f"({have}): use device='cpu' or 'auto'")
    return name


def refuse_negative_labels(labels, split: str) -> None:
    if labels is not None and len(labels) and int(np.min(labels)) < 0:
        raise UsageError(f"{split} labels must be class indices >= 0; found "
                         f"{int(np.min(labels))}")


def check_first_batch(model, device, sets: dict, classes_from_outputs: bool) -> None:
    """Run ``model`` on the first two samples of each set (eval mode, no gradient:
    nothing changes) and refuse, in one line, inputs it cannot take and, with
    ``classes_from_outputs`` (classification with the default cross-entropy), labels
    outside its outputs. ``sets``: name -> samples (``take``, ``labels``)."""
    import torch

    training = model.training
    model.eval()
    try:
        for split, data in sets.items():
            if data is None or len(data) == 0:
                continue
            xb, _ = data.take(np.arange(min(2, len(data))))
            try:
                with torch.no_grad():
                    out = call_model(model, to_device(xb, device))
            except Exception as exc:  # noqa: BLE001  (the model rejects these inputs)
                text = str(exc).splitlines()[0] if str(exc) else ""
                shape = f" of shape {tuple(xb.shape[1:])} per sample" if hasattr(xb, "shape") else ""
                raise UsageError(f"{split} set: the model cannot take its inputs{shape} "
                                 f"({type(exc).__name__}: {text})") from None
            if classes_from_outputs and getattr(out, "ndim", 0) == 2:
                labels = data.labels()
                refuse_negative_labels(labels, split)
                top, classes = int(np.max(labels)), int(out.shape[1])
                if top >= classes:
                    raise UsageError(f"{split} labels must be class indices below the "
                                     f"model's {classes} outputs; found label {top}")
    finally:
        model.train(training)
