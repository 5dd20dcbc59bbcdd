"""A script's own command line with the package's flags in it.

A training script keeps its ``argparse`` parser; :func:`add_arguments` adds the package's
settings to it as one argument group (a flag the parser has already is the script's: its
value feeds the setting of the same name; ``prefix="mt"`` adds every flag as
``--mt-NAME`` instead), and ``RunSettings.from_namespace`` makes the run's
:class:`~mpi_teleport.session.prepare.RunSettings` of the parsed namespace
(``RunSettings.from_namespace``, in :mod:`mpi_teleport.session.prepare`, which reads the
namespace with :func:`raw_of_namespace`). ``RunSettings.from_args`` takes a list of flags
the same way. Both then take one path, ``prepare.script_settings``: the flags
checked by the settings table's rules, spelt as flags, for the script's own problem
object (no rule of the command lines' built-in problems), Python objects given by
keyword over them (``optimizer=``, ``lr=`` a scheduler or function, ``callback=``), the
disk checked as the API checks it (a ``--resume`` compares the problem's fingerprint and
the settings; nothing is taken from the checkpoint), then the one preparation of a run,
:func:`~mpi_teleport.session.prepare.prepare`.
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import CLI, Naming, UsageError
from .settings import PROBLEM_ROWS, Values, coerce, rows, setting

__all__ = ["add_arguments", "raw_of_namespace", "script_rows", "PROBLEM_ROWS", "OBJECTS"]

_MARK = "_mpi_teleport_flags"  # (the namespace's note of which flags are the package's)
# Python objects a script hands by keyword (the others are settings, as flags give them).
OBJECTS = ("optimizer", "lr", "callback", "topology")


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
