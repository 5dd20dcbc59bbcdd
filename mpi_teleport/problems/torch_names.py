"""Torch optimizers and learning-rate schedulers named on a command line.

``--optimizer NAME`` names any ``torch.optim`` optimizer class, matched without regard to
case (``adadelta`` is ``torch.optim.Adadelta``), or a third-party one by its dotted path
(``package.module.Class`` or ``package.module:Class``); ``--lr-scheduler NAME`` likewise a
``torch.optim.lr_scheduler`` class. Their arguments come as one string of ``key=value``
pairs separated by commas, each value a Python literal (``rho=0.95,eps=1e-6``,
``milestones=[2, 4],gamma=0.5``; a string is quoted: ``mode='triangular2'``), checked
against the class's signature before anything runs. What they build is handed to the
Python API's own plumbing (``optimizer=`` a class with its keywords, ``lr=`` a scheduler
factory), so a command line steps exactly as the keywords do.

Every refusal is one :class:`~mpi_teleport.errors.UsageError` line naming the flag.
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
from typing import Any

from ..errors import UsageError

__all__ = ["resolve_class", "parse_arguments", "factory", "is_torch_optimizer"]

# (what each flag names: the torch module holding its classes, and their base class)
_KINDS = {"optimizer": ("torch.optim", "Optimizer", "--optimizer"),
          "lr_scheduler": ("torch.optim.lr_scheduler", "LRScheduler", "--lr-scheduler")}
_NOT_CLASSES = {"Optimizer", "LRScheduler", "_LRScheduler"}  # (bases, not choices)


def _torch_classes(kind: str) -> dict[str, type]:
    module_name, base_name, _ = _KINDS[kind]
    module = importlib.import_module(module_name)
    base = getattr(module, base_name)
    return {name: cls for name, cls in vars(module).items()
            if isinstance(cls, type) and issubclass(cls, base) and name not in _NOT_CLASSES
            and not name.startswith("_")}


def is_torch_optimizer(name: str) -> bool:
    """Whether ``torch.optim`` has an optimizer class of exactly ``name`` (False without
    torch)."""
    try:
        import torch
    except ImportError:
        return False
    found = getattr(torch.optim, name, None)
    return isinstance(found, type) and issubclass(found, torch.optim.Optimizer)


def resolve_class(name: str, kind: str) -> type:
    """The class ``name`` stands for (``kind``: ``"optimizer"`` or ``"lr_scheduler"``): a
    torch class matched without regard to case, or a dotted path's class. UsageError (one
    line) listing torch's names for an unknown one."""
    flag = _KINDS[kind][2]
    try:
        import torch  # noqa: F401  (the classes are torch's)
    except ImportError:  # pragma: no cover (the nn extra)
        raise UsageError(f"{flag} {name}: needs torch (pip install the package's nn extra)") \
            from None
    text = str(name).strip()
    if "." in text or ":" in text:
        return _dotted(text, kind, flag)
    found = _torch_classes(kind)
    by_case = {key.lower(): cls for key, cls in found.items()}
    cls = by_case.get(text.lower())
    if cls is None:
        raise UsageError(f"{flag} {text}: no such class in {_KINDS[kind][0]}; choose one of "
                         f"{', '.join(sorted(found, key=str.lower))}, or give a dotted path "
                         f"package.module.Class")
    return cls


def _dotted(text: str, kind: str, flag: str) -> type:
    module_name, sep, attr = text.partition(":")
    if not sep:
        module_name, _, attr = text.rpartition(".")
    if not module_name or not attr or not all(p.isidentifier() for p in
                                              [*module_name.split("."), *attr.split(".")]):
        raise UsageError(f"{flag} {text}: not a dotted path package.module.Class")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{flag} {text}: cannot import {module_name} ({exc}); put it on "
                         f"PYTHONPATH or install it") from None
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise UsageError(f"{flag} {text}: {module_name} has no {attr}")
    module_name_, base_name, _ = _KINDS[kind]
    base = getattr(importlib.import_module(module_name_), base_name)
    if not (isinstance(target, type) and issubclass(target, base)):
        raise UsageError(f"{flag} {text}: not a {module_name_}.{base_name} class")
    return target


def parse_arguments(text: str | None, flag: str) -> dict[str, Any]:
    """``key=value,key=value`` (each value a Python literal) as a dict; None or empty:
    none. UsageError (one line) naming the pair that does not parse."""
    if text is None or not str(text).strip():
        return {}
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        raise UsageError(f"{flag} {text!r}: expected key=value pairs separated by commas, "
                         f"each value a Python literal (rho=0.95,eps=1e-6)") from None
    if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
        raise UsageError(f"{flag} {text!r}: expected key=value pairs separated by commas "
                         f"(rho=0.95,eps=1e-6), not positional values")
    out: dict[str, Any] = {}
    for keyword in call.keywords:
        try:
            out[str(keyword.arg)] = ast.literal_eval(keyword.value)
        except ValueError:
            raise UsageError(f"{flag} {text!r}: {keyword.arg}= is not a Python literal "
                             f"(a number, True/False/None, a quoted string, a list or "
                             f"tuple)") from None
    return out


def _check_signature(cls: type, arguments: dict[str, Any], flag: str, first: str) -> None:
    """The arguments bind to ``cls``'s signature (after its first parameter, the
    parameters or the optimizer), or one line naming what it takes."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # (no signature to check: torch checks when built)
        return
    try:
        signature.bind_partial(first, **arguments)
    except TypeError as exc:
        takes = [p.name for p in list(signature.parameters.values())[1:]
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        raise UsageError(f"{flag}-args: {cls.__name__} refuses them ({exc}); it takes "
                         f"{', '.join(takes)}") from None


def factory(name: str, text: str | None, kind: str, **fixed: Any) -> Any:
    """The class ``name`` with the arguments ``text`` (and ``fixed``: the optimizer's
    ``lr``) as ``functools.partial``, what the API's ``optimizer=`` and ``lr=`` take;
    checked against the class's signature. UsageError (one line) otherwise."""
    flag = _KINDS[kind][2]
    cls = resolve_class(name, kind)
    arguments = parse_arguments(text, f"{flag}-args")
    clash = sorted(set(arguments) & set(fixed))
    if clash:
        raise UsageError(f"{flag}-args: {clash[0]}= is the run's own setting; give it as "
                         f"--{clash[0].replace('_', '-')}")
    _check_signature(cls, {**fixed, **arguments}, flag, "params" if kind == "optimizer"
                     else "optimizer")
    return functools.partial(cls, **fixed, **arguments)
