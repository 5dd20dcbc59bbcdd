"""The argument parser of every command of the package: bad input is one line.

argparse answers a bad command line with its usage block and then the error; the
package's promise is one line on stderr saying what was wrong and what to do, and exit
status 2 (``--help`` still prints the usage). The simulator and the MPI runtime raise a
:class:`~mpi_teleport.errors.UsageError` instead (:mod:`mpi_teleport.front.cli`: under MPI every
rank must learn of it before any exits); the small commands
(``python -m mpi_teleport.checkpoint``, ``.launch``, ``.mpi_flavor``, ``.latency probe``,
the examples) use :class:`OneLineParser`.
"""
from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 2


def version_line(prog: str) -> str:
    """What every command's ``--version`` prints: ``PROG VERSION``."""
    from ._version import __version__

    return f"{prog} {__version__}"


def add_version(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` the ``--version`` flag of every command (the package's version)."""
    parser.add_argument("--version", action="version", version=version_line(parser.prog),
                        help="print the package's version and exit")
    return parser


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are ``PROG: error: MESSAGE (see --help)``, exit 2."""

    def error(self, message):
        usage_error(self.prog, f"{message} (see {self.prog} --help)")


def usage_error(prog: str, message: str):
    """Print ``PROG: error: MESSAGE`` on stderr and exit with status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USAGE)
