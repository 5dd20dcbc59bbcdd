"""Inputs torch would only reject deep inside a round, with a traceback, refused at
:class:`~mpi_teleport.problems.torch_problem.TorchProblem` construction in one line
(:class:`~mpi_teleport.errors.UsageError`): a device that is not a torch device
or CUDA without a GPU, class labels below 0 or beyond the model's outputs, inputs the
model cannot take. The Problem side (shapes and values of ``initial``/``gradient``/
``evaluate``) is :mod:`mpi_teleport.core.contract`'s.
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


def check_losses(model, device, train, task: str, losses: dict, target_of) -> None:
    """Call each loss of ``losses`` (name -> ``fn(output, target)``, None: the default
    of ``task``) on the model's output for the first two training samples (eval mode, no
    gradient: nothing changes) and refuse, in one line naming the loss, one that raises
    or returns anything but one number (a scalar tensor): torch would say so only inside
    a round (``grad can be implicitly created only for scalar outputs``) or at the first
    evaluation. ``target_of``: the labels as the loss receives them."""
    import torch

    if train is None or len(train) == 0:
        return
    training = model.training
    model.eval()
    try:
        xb, yb = train.take(np.arange(min(2, len(train))))
        with torch.no_grad():
            out = call_model(model, to_device(xb, device))
            target = target_of(yb.to(out.device) if hasattr(yb, "to") else yb)
            for name, fn in losses.items():
                _check_loss(name, fn, out, target, task)
    finally:
        model.train(training)


def _check_loss(name: str, fn, out, target, task: str) -> None:
    import torch

    own = fn is not None
    if fn is None:
        from .torch_metrics import default_loss

        fn = default_loss(task)
    default_names = {"cross_entropy": "cross-entropy", "_mse": "mean squared error",
                     "binary_cross_entropy_with_logits": "binary cross-entropy on logits"}
    called = (f"{name}(output, target)" if own else f"the default loss of task {task!r} "
              f"({default_names.get(getattr(fn, '__name__', ''), 'loss')})")
    shapes = (f"output of shape {tuple(getattr(out, 'shape', ()))}, target of shape "
              f"{tuple(getattr(target, 'shape', ()))} and dtype "
              f"{str(getattr(target, 'dtype', '?')).replace('torch.', '')}")
    try:
        value = fn(out, target)
    except Exception as exc:  # noqa: BLE001  (torch's message, in one line)
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        hint = (f"give the model one output per class and integer class labels, or pass "
                f"loss= for these targets" if not own else
                f"make it take the model's output and the targets")
        if task == "regression" and not own:
            hint = ("the targets are not integer class labels, so the task is regression "
                    "(mean squared error against the model's output): give integer class "
                    "labels for classification, or task= and loss= for these targets")
        raise UsageError(f"{called} raised {type(exc).__name__}: {text} on the first "
                         f"training samples ({shapes}); {hint}") from None
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        got = (f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
               else type(value).__name__ if value is not None else "None")
        raise UsageError(f"{called} returned {got} on the first training samples; it must "
                         f"return the batch's loss as one number, a scalar tensor (e.g. "
                         f"reduction='mean')")
