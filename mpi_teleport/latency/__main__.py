"""``python -m mpi_teleport.latency probe ...`` (under mpirun): measure what a latency spec
costs per message. Without a command, or with another one: one line, exit 2 (``--help``
prints the latency models)."""
import sys

from ..parsers import usage_error, version_line
from .model import __doc__ as _DOC

PROG = "python -m mpi_teleport.latency"

command = sys.argv[1:2]
if command in (["-h"], ["--help"]):
    print(_DOC)
    print(f"usage: mpirun -n N {PROG} probe --latency SPEC [--reps R] [--dim D]")
    sys.exit(0)
if command == ["--version"]:
    print(version_line(PROG))
    sys.exit(0)
if command != ["probe"]:
    given = f"unknown command {command[0]!r}" if command else "no command given"
    usage_error(PROG, f"{given}; the one command is probe: mpirun -n N {PROG} probe "
                      f"--latency SPEC (see {PROG} --help)")
from .probe import probe  # noqa: E402

sys.exit(probe(sys.argv[2:]))
