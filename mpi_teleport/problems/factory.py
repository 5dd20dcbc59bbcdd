"""``--problem package.module:function``: a user's problem factory on the command line.

The factory is called with keyword arguments ``nodes`` and ``seed``, and with those of
the following its signature names (any of them when it takes ``**kwargs``):

* ``local_nodes`` -- the nodes this process computes (an MPI rank: ``[rank]``; the
  simulator: None), to load only their data (:class:`~.torch_problem.TorchProblem`
  takes it as is);
* ``device`` -- resolved from ``--device``: ``"cpu"`` or this rank's ``"cuda:i"``;
* the data flags ``batch_size``, ``sampling``, ``alpha``, ``val_fraction``, ``data_dir``,
  ``download`` when given on the command line (else the factory's own defaults hold).

A data flag given on the command line that the factory does not take is refused (one
line), rather than recorded as if it had been used; config.json records the arguments
the factory received (``factory_args``) and leaves out the flags it did not take. The
problem is built once per process and reused by every run of ``--algorithm compare``.
"""
from __future__ import annotations

import importlib
import inspect

from ..errors import UsageError

__all__ = ["FLAGS", "from_factory", "arguments", "record"]

FLAGS = ("batch_size", "sampling", "alpha", "val_fraction", "data_dir", "download", "device")
_BUILT: dict = {}  # (name, arguments) -> problem: one build per process


def _function(name: str):
    module_name, _, function_name = str(name).partition(":")
    if not module_name or not function_name:
        raise UsageError(f"--problem {name}: give package.module:function")
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exc:  # (else the command would end with its status, having run nothing)
        raise UsageError(f"--problem {name}: importing {module_name!r} called "
                         f"sys.exit({exc.code!r}); a module given to --problem must not exit "
                         f"when imported (put its script code under "
                         f"if __name__ == '__main__':)") from None
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001  (any failure to import is
        # the user's to fix; a KeyboardInterrupt here is the module's own: the command's
        # signal handler turns a real Ctrl-C into a stop, never into this exception)
        if _not_found(exc, module_name):
            raise UsageError(f"--problem {name}: cannot import {module_name!r} ({_what(exc)}); "
                             f"check the name and that it is on PYTHONPATH") from None
        raise UsageError(f"--problem {name}: cannot import {module_name!r}: importing it "
                         f"raised {_what(exc)}; fix the module or install what it needs (its "
                         f"top level runs when imported)") from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise UsageError(f"--problem {name}: {module_name} has no function {function_name!r}")
    return factory


def _not_found(exc: BaseException, module_name: str) -> bool:
    """The module itself (or a package above it) is missing, not something it imports."""
    missing = getattr(exc, "name", None) or ""
    return isinstance(exc, ModuleNotFoundError) and bool(missing) and (
        module_name == missing or module_name.startswith(missing + "."))


def _what(exc: BaseException) -> str:
    """An exception in a few words for a one-line message: its type and first line."""
    text = str(exc).splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _accepted(factory) -> set | None:
    """Parameter names the factory takes; None: any (``**kwargs``) or unknown."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # (a builtin without a signature: nodes and seed only)
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                 inspect.Parameter.KEYWORD_ONLY)}


def _given(cfg) -> list:
    """The data flags whose value differs from the default (given on the command line)."""
    return [flag for flag in FLAGS if flag in cfg.given]


def arguments(name: str, cfg, local_nodes=None, local_rank: int = 0) -> dict:
    """The keyword arguments the factory ``name`` receives for ``cfg``, checked: a given
    data flag the factory does not take is a UsageError."""
    accepted = _accepted(_function(name))
    takes = (lambda p: True) if accepted is None else (lambda p: p in accepted)
    refused = [flag for flag in _given(cfg) if not takes(flag)]
    if refused:
        flags = ", ".join("--" + f.replace("_", "-") for f in refused)
        raise UsageError(f"--problem {name}: the factory takes no {', '.join(refused)}, so "
                         f"{flags} would be ignored; drop {'it' if len(refused) == 1 else 'them'} "
                         f"or add the parameter to the factory")
    args = {"nodes": cfg.nodes, "seed": cfg.seed}
    if takes("local_nodes"):
        args["local_nodes"] = None if local_nodes is None else [int(i) for i in local_nodes]
    given = _given(cfg)
    for flag in FLAGS:  # given ones (the factory's own defaults stand otherwise); the
        if takes(flag) and (flag in given or flag == "device"):  # device: this rank's
            value = getattr(cfg, flag)
            if flag == "device":
                from .device import pick_device

                value = pick_device(value, local_rank)
            args[flag] = value
    return args


def record(name: str, cfg, mpi: bool) -> dict:
    """What config.json says of a factory: ``factory_args`` (``local_nodes``: None in the
    simulator, ``"[rank]"`` under MPI) and the data flags it did not take, to leave out."""
    args = arguments(name, cfg)
    if mpi and "local_nodes" in args:
        args["local_nodes"] = "[rank]"
    return {"factory_args": args, "unused": [f for f in FLAGS if f not in args]}


def from_factory(name: str, *, nodes: int | None = None, seed: int | None = None, cfg=None,
                 local_nodes=None, local_rank: int = 0):
    """Call the factory ``package.module:function`` (with ``nodes`` and ``seed``, or
    with what ``cfg`` gives it, :func:`arguments`); it must return a Problem. Anything
    else is a UsageError saying what. Built once per process for the same arguments."""
    from ..problem import with_defaults

    args = (arguments(name, cfg, local_nodes, local_rank) if cfg is not None
            else {"nodes": nodes, "seed": seed})
    key = (name, repr(sorted(args.items())))
    if key in _BUILT:
        return _BUILT[key]
    factory = _function(name)
    try:
        problem = factory(**args)
    except SystemExit as exc:  # (else the command line would exit with it, having run nothing)
        raise UsageError(f"--problem {name}: the factory called sys.exit({exc.code!r}) instead "
                         f"of returning a Problem") from None
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001  (see _function)
        raise UsageError(f"--problem {name}: the factory failed ({_what(exc)})") from None
    try:
        with_defaults(problem)
    except TypeError as exc:
        raise UsageError(f"--problem {name}: the factory returned {type(problem).__name__}, "
                         f"not a Problem ({exc})") from None
    _BUILT.clear()  # (keep one: a process runs one configuration)
    _BUILT[key] = problem
    return problem
