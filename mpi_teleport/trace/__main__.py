"""``python -m mpi_teleport.trace FILE [--png OUT] [--compare SIMFILE]``: where the time of a
traced run went (:mod:`mpi_teleport.trace.summary`).

``FILE`` is a trace written by ``--trace`` (or ``$MPI_TELEPORT_TRACE``); a run killed
before its end left the trace of its last checkpoint there, and ``--merge`` rebuilds it
from the processes' part files (``FILE.parts/``) when they are newer.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    from ..parsers import add_version

    parser = argparse.ArgumentParser(
        prog="python -m mpi_teleport.trace",
        description="Where the time of a traced run went: each part of the round's share of "
                    "the wall time, its median and slowest process, the critical path of a "
                    "typical round and the processes that waited most.")
    add_version(parser)
    parser.add_argument("file", type=Path, help="a trace file (--trace PATH of a run)")
    parser.add_argument("--png", type=Path, metavar="OUT",
                        help="draw the shares and the timeline of a typical round (matplotlib)")
    parser.add_argument("--rounds", type=int, default=3, metavar="R",
                        help="rounds the drawing's timeline shows (default 3)")
    parser.add_argument("--compare", type=Path, metavar="SIMFILE",
                        help="a trace of the run's simulation: each part beside its prediction")
    parser.add_argument("--merge", action="store_true",
                        help="first rebuild FILE from its part files (FILE.parts/), e.g. after "
                             "a job was killed")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        print(f"--rounds {args.rounds}: give a whole number >= 1 (the rounds the drawing's "
              f"timeline shows)", file=sys.stderr)
        return 2
    from .chrome import load, write_trace
    from .summary import compare, draw, read, report
    from .tracer import read_parts

    if args.merge:
        parts = read_parts(args.file)
        if not parts:
            print(f"{args.file}: no part files in {args.file}.parts/ to merge", file=sys.stderr)
            return 2
        write_trace(args.file, parts)
    try:
        trace = read(load(args.file))
    except (OSError, ValueError) as exc:
        print(f"{args.file}: not a readable trace file ({exc})", file=sys.stderr)
        return 2
    print(report(trace))
    if args.compare is not None:
        try:
            sim = read(load(args.compare))
        except (OSError, ValueError) as exc:
            print(f"{args.compare}: not a readable trace file ({exc})", file=sys.stderr)
            return 2
        print()
        print(f"beside {args.compare}:")
        print(compare(trace, sim))
    if args.png is not None:
        try:
            draw(trace, args.png, args.rounds, title=str(args.file.name))
        except ImportError:
            print("--png needs matplotlib (pip install matplotlib)", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"--png {args.png}: cannot write it ({exc.strerror or exc})", file=sys.stderr)
            return 2
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
