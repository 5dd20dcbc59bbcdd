"""A script's own command line with the package's flags in it.

A training script keeps its ``argparse`` parser; :func:`add_arguments` adds the package's
settings to it as one argument group (a flag the parser has already is the script's: its
value feeds the setting of the same name; ``prefix="mt"`` adds every flag as
``--mt-NAME`` instead), and :func:`settings_from_namespace` makes the run's
:class:`~mpi_teleport.front.prepare.RunSettings` of the parsed namespace
(``RunSettings.from_namespace``). ``RunSettings.from_args`` takes a list of flags the same
way (:func:`settings_from_args`). Both then take one path, :func:`settings_of`: the flags
checked by the settings table's rules, spelt as flags, for the script's own problem
object (no rule of the command lines' built-in problems), Python objects given by
keyword over them (``optimizer=``, ``lr=`` a scheduler or function, ``callback=``), the
disk checked as the API checks it (a ``--resume`` compares the problem's fingerprint and
the settings; nothing is taken from the checkpoint), then the one preparation of a run,
:func:`~mpi_teleport.front.prepare.prepare`.
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import CLI, Naming, UsageError
from .settings import Values, coerce, rows, setting

__all__ = ["add_arguments", "settings_from_args", "settings_from_namespace", "settings_of",
           "script_rows"]

_MARK = "_mpi_teleport_flags"  # (the namespace's note of which flags are the package's)
# The rows that build the command lines' problem (problems.ProblemSettings, less the run's
# own nodes, seed, batch size and elastic mode): a script runs its own problem.
PROBLEM_ROWS = ("problem", "dim", "sigma2", "zeta2", "sampling", "alpha", "val_fraction",
                "data_dir", "download", "device")
# Python objects a script hands by keyword (the others are settings, as flags give them).
_OBJECTS = ("optimizer", "lr", "callback", "topology")


def script_rows():
    """The rows a script's command line takes: every one but those building a problem."""
    return [row for row in rows() if row.name not in PROBLEM_ROWS]


def add_arguments(parser: argparse.ArgumentParser, prefix: str | None = None,
                  title: str = "mpi_teleport") -> argparse._ArgumentGroup:
    """Add the package's settings to a script's ``parser`` as the argument group
    ``title``: every flag of ``python -m mpi_teleport.sim`` but those that build its
    problem, and ``--config FILE.toml``. A flag the parser has already (``--lr``,
    ``--epochs``, ``--batch-size``, ``--seed``) is left to the script, and its value
    feeds the setting of that name; ``prefix="mt"`` adds every flag as ``--mt-NAME``
    instead (the script's flags then feed nothing). Flags not given stay out of the
    namespace, so a TOML file and the defaults apply (``parser.set_defaults(k=2)`` gives
    the script's own default); whole numbers and numbers are parsed as such
    (``args.nodes`` is an int), the others as text the table's rules check. Returns the group; the namespace
    goes to :meth:`mpi_teleport.RunSettings.from_namespace`.

    >>> import argparse, mpi_teleport as mt
    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--lr", type=float, default=1.0)
    >>> _ = mt.add_arguments(parser)
    >>> args = parser.parse_args(["--k", "2"])
    >>> args.lr, args.k
    (1.0, '2')
    """
    if prefix is not None and (not isinstance(prefix, str) or not prefix.strip("-")
                               or not prefix.replace("-", "_").isidentifier()):
        raise UsageError(f"add_arguments: prefix must be a word such as 'mt', got {prefix!r}")
    stem = "" if prefix is None else prefix.strip("-") + "-"
    group = parser.add_argument_group(title, "settings of the decentralised run "
                                      "(python -m mpi_teleport.sim --help)")
    known = parser._option_string_actions  # (argparse's own map of the flags it has)
    added: dict[str, str] = {}
    shared: dict[str, tuple[str, Any]] = {}  # name: (the script's dest, its default)
    for row in [*script_rows(), None]:
        name = "config" if row is None else row.name
        flag = "--" + stem + name.replace("_", "-")
        if flag in known:
            if prefix is None:
                shared[name] = (known[flag].dest, known[flag].default)
            continue
        dest = (stem + name).replace("-", "_")
        kwargs: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS}
        if row is None:
            kwargs.update(metavar="FILE.toml", help="read settings from a TOML file (keys as "
                          "the flags); flags given override it")
        elif row.kind == "bool":
            kwargs.update(action=argparse.BooleanOptionalAction, help=row.help)
        else:
            kwargs.update(help=row.help, metavar=row.metavar or (
                "{" + ",".join(row.choices) + "}" if row.choices else name.upper()))
            if row.kind == "fails":
                kwargs["action"] = "append"
            elif row.kind in ("int", "float"):  # (the script reads them typed: --nodes)
                kwargs["type"] = int if row.kind == "int" else float
        group.add_argument(flag, **kwargs)
        added[name] = dest
    parser.set_defaults(**{_MARK: {"added": added, "shared": shared}})
    return group


def raw_of_namespace(args: argparse.Namespace) -> dict:
    """The settings a namespace of :func:`add_arguments`'s parser gives: the package's
    flags given, and the script's own flags of the same names (None: not given)."""
    mark = getattr(args, _MARK, None)
    if mark is None:
        raise UsageError("RunSettings.from_namespace: the namespace was not parsed by a "
                         "parser given mt.add_arguments(parser); add it before parse_args()")
    raw: dict = {}
    config = mark["added"].get("config")
    if config is not None and getattr(args, config, None) is not None:
        from .settings import from_toml

        raw.update(from_toml(getattr(args, config)))
    defaulted = set()  # (the script's flags left at the script's default)
    for name, (dest, default) in mark["shared"].items():
        value = getattr(args, dest, None)
        if name != "config" and value is not None:
            raw[name] = coerce(setting(name), value, "command line")
            if value == default:
                defaulted.add(name)
    for name, dest in mark["added"].items():
        if name != "config" and hasattr(args, dest):
            raw[name] = coerce(setting(name), getattr(args, dest), "command line")
    if "epochs" in defaulted and "rounds" in raw and "rounds" not in defaulted:
        del raw["epochs"]  # (--rounds given beats the script's default --epochs)
    return raw


def settings_from_args(argv, toml=None, *, problem: Any, comm: Any = None,
                       known_only: bool = False, **overrides: Any):
    """``RunSettings.from_args``: the flags ``argv`` (default ``sys.argv[1:]``; with
    ``known_only`` the others are returned beside the settings) through
    :func:`settings_of`."""
    from . import cli

    parser = cli.build_parser("mpi_teleport", "")
    refused: str | None = None
    try:
        raw, rest = cli.raw_of(parser, cli.with_config(argv, toml), known_only)
    except UsageError as exc:  # (every process refuses alike: the same flags)
        raw, rest, refused = {}, [], str(exc)
    settings = settings_of(raw, problem=problem, comm=comm, refused=refused, **overrides)
    return (settings, rest) if known_only else settings


def settings_from_namespace(args: argparse.Namespace, *, problem: Any, comm: Any = None,
                            **overrides: Any):
    """``RunSettings.from_namespace``: the namespace of a parser given
    :func:`add_arguments`, through :func:`settings_of`."""
    refused: str | None = None
    try:
        raw = raw_of_namespace(args)
    except UsageError as exc:
        raw, refused = {}, str(exc)
    return settings_of(raw, problem=problem, comm=comm, refused=refused, **overrides)


def settings_of(raw: dict, *, problem: Any, comm: Any = None, refused: str | None = None,
                **overrides: Any):
    """The :class:`~mpi_teleport.front.prepare.RunSettings` of one run of ``problem`` (the
    script's own object) from the raw settings of its command line (given flags,
    coerced) and ``overrides`` by keyword: a setting's value (``rounds=1``; None drops
    what the flags gave) or a Python object (``optimizer=`` a torch optimizer class,
    factory or instance; ``lr=`` a number, a function of the round or a torch scheduler,
    built or to build on the optimizer; ``callback=``; ``topology=`` a function).
    ``comm``: None (the simulator), a communicator, or ``"auto"``; under MPI every
    process learns the first refusal (one collective on a duplicate of ``comm``).
    UsageError (one line, spelt as flags) for bad input."""
    from ..runtime.launched import resolve_comm

    comm = resolve_comm(comm)
    error, settings = refused, None
    if error is None:
        try:
            settings = _settings(dict(raw), problem, comm, overrides)
        except UsageError as exc:
            error = str(exc)
    if comm is not None:  # (every process stops together, or none does)
        from ..runtime.collective import check_communicator, first_error
        from ..runtime.transport import Transport

        check_communicator(comm)
        transport = Transport.duplicate(comm)
        try:
            error = first_error(transport.allgather(error))
        finally:
            transport.free()
    if error:
        raise UsageError(error)
    return settings


def _settings(raw: dict, problem: Any, comm: Any, overrides: dict):
    from ..core.schedulers import is_scheduler, is_scheduler_factory
    from ..problem import with_defaults
    from . import preflight
    from . import resume as resume_rules
    from .build import active_nodes, record, spec_of
    from .prepare import _legs, _places, check_disk, prepare, with_epochs
    from .report import runs_requested

    objects = {name: overrides.pop(name) for name in _OBJECTS if name in overrides
               and not _is_setting(name, overrides[name])}
    for name, value in overrides.items():
        found = setting(name) if name in {row.name for row in script_rows()} else None
        if found is None:
            raise UsageError(f"{name}=: not a setting a script's run takes (the flags that "
                             f"build a problem are the command lines')")
        if value is None:
            raw.pop(name, None)
        else:
            raw[name] = coerce(found, value, "command line") if isinstance(value, str) else value
    building = [name for name in PROBLEM_ROWS if name in raw]
    if building:
        flags = ", ".join(setting(name).flag for name in building)
        raise UsageError(f"{flags}: RunSettings.from_args runs the problem you pass "
                         f"(problem=); the flags that build one are the command lines': "
                         f"drop them")
    world = None if comm is None else comm.Get_size()
    values = preflight.load(raw, world, script=True)
    if values.algorithm == "compare":
        raise UsageError("--algorithm compare runs two methods; RunSettings.from_args "
                         "makes one run: give --algorithm teleportation or dsgd")
    problem = with_defaults(problem)
    _check_batch_size(raw, values, problem)
    (algorithm, k), = runs_requested(values)
    run = Values({name: value for name, value in values.replace(
        algorithm=algorithm, k=values.nodes if algorithm == "dsgd" else k).items()
        if name not in PROBLEM_ROWS}, CLI)
    run = _with_objects(run, objects, problem, raw, is_scheduler, is_scheduler_factory,
                        active_nodes)
    counted = with_epochs(run, problem)  # (the rounds and batch size the run records)
    spec = spec_of(counted, problem)
    touches = values.checkpoint_dir is not None or values.out is not None \
        or values.resume is not None
    identity = resume_rules.describe_problem(problem, spec.seed, touches)
    prepared = check_disk(_legs(values), _places(values), nodes=values.nodes,
                          rounds=spec.rounds, record=record(counted, spec.optimizer, identity),
                          naming=Naming(True, frozenset(raw) | frozenset(objects)),
                          latency=values.latency)
    return prepare(problem, run, comm, prepared=prepared, identity=identity,
                   callback=objects.get("callback"))


def _is_setting(name: str, value: Any) -> bool:
    """Whether a keyword among the objects' names is a setting's plain value instead
    (``optimizer="adam"``, ``lr=0.1``, ``topology="ring"``)."""
    if name == "callback" or value is None:
        return False
    if name == "lr":
        return not callable(value) and not hasattr(value, "step")
    return isinstance(value, str)


def _with_objects(run: Values, objects: dict, problem, raw: dict, is_scheduler,
                  is_scheduler_factory, active_nodes) -> Values:
    """The run's values with the script's Python objects in them: ``optimizer=`` read as
    the API reads it (its rule held as the optimizer row), ``lr=`` a scheduler replayed
    as the step size, ``topology=`` a function."""
    from ..core.schedulers import step_size
    from .loop_options import optimizer_factory, optimizer_settings

    changes: dict[str, Any] = {}
    optimizer = objects.get("optimizer")
    if optimizer is not None:
        if run.optimizer != "sgd" or run.optimizer_args is not None:
            raise UsageError(f"--optimizer {run.optimizer} and optimizer= both name the "
                             f"optimizer: give one")
        lr, momentum, nesterov, rule = optimizer_settings(
            optimizer, problem, run.lr if "lr" in raw else None, run.momentum, run.nesterov)
        changes.update(optimizer=rule, momentum=momentum, nesterov=nesterov, lr=lr)
    lr = objects.get("lr")
    if lr is not None:
        if run.lr_scheduler is not None:
            raise UsageError(f"--lr-scheduler {run.lr_scheduler} and lr= both set the step "
                             f"size: give one")
        if is_scheduler_factory(lr) and optimizer is None:
            optimizer = optimizer_factory({**run, **changes}, plain_sgd=True)
        lr = step_size(lr, run.lr_scheduler_interval, problem, active_nodes(run), optimizer)
        changes["lr"] = lr
    if "topology" in objects:
        changes["topology"] = objects["topology"]
    return run.replace(**changes)


def _check_batch_size(raw: dict, values: Values, problem) -> None:
    """``--batch-size`` given: the problem's own batch size, or refused in one line (a
    problem draws its batches as it was built)."""
    if "batch_size" not in raw:
        return
    inner = getattr(problem, "problem", problem)
    own = getattr(problem, "batch_size", None)
    given = values.batch_size
    if own is None:
        raise UsageError(f"--batch-size {given}: {type(inner).__name__} draws no batches of "
                         f"a set size; drop --batch-size")
    if int(own) != int(given):
        raise UsageError(f"--batch-size {given}: the problem draws batches of {own} (it was "
                         f"built with batch_size={own}); build it with batch_size={given} or "
                         f"drop --batch-size")
