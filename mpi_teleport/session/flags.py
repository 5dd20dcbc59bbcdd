"""The settings table's rows as flags: the parser of ``python -m mpi_teleport.sim``, ``.run``
and a script's ``RunSettings.from_args`` (a row added is a flag), the flags read as raw
settings (only those given, each coerced as its row says, a ``--config FILE.toml``
under them). A bad flag is one line (:class:`~mpi_teleport.errors.UsageError`)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..errors import UsageError
from ..parsers import add_version
from .settings import coerce, from_toml, rows, setting


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage + message; we want one line
        raise UsageError(f"{message} (see --help)")


def build_parser(prog: str, description: str, epilog: str = "") -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,  # absent flags stay absent: the file may set them
    )
    add_version(parser)
    parser.add_argument("--config", metavar="FILE.toml",
                        help="read settings from a TOML file (keys as the flags, e.g. "
                             "lr = 0.05, log-every = 10); flags given here override it")
    for opt in rows():  # (the table as it is now: a row added is a flag)
        kwargs: dict[str, Any] = {"help": opt.help, "dest": opt.name}
        if opt.kind == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif opt.kind == "fails":
            kwargs["action"] = "append"
            kwargs["metavar"] = opt.metavar
        else:
            kwargs["metavar"] = opt.metavar or (
                "{" + ",".join(opt.choices) + "}" if opt.choices else opt.name.upper()
            )
        parser.add_argument(opt.flag, **kwargs)
    return parser


def raw_of(parser: argparse.ArgumentParser, argv, known_only: bool = False
           ) -> tuple[dict, list[str]]:
    """The flags ``argv`` as raw settings (only those given, each coerced as its row
    says; a ``--config FILE.toml`` under them), and, with ``known_only``, the arguments
    the parser does not know (else they are refused in one line)."""
    if known_only:
        ns, rest = parser.parse_known_args(argv)
    else:
        ns, rest = parser.parse_args(argv), []
    given = vars(ns)
    raw = from_toml(given.pop("config")) if "config" in given else {}
    for name, value in given.items():
        raw[name] = coerce(setting(name), value, "command line")
    return raw, list(rest)


def with_config(argv, toml=None) -> list[str]:
    """``argv`` (None: ``sys.argv[1:]``) with ``--config TOML`` before it (its own
    ``--config`` wins)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return argv if toml is None else ["--config", os.fspath(toml), *argv]
