"""Run a user's script as one rank of an MPI job; what ``python -m mpi_teleport.launch -n
4 train.py`` starts on every rank:

    mpirun -n 4 python -m mpi_teleport.script_runner train.py [its args]
    mpirun -n 4 python -m mpi_teleport.script_runner -m package.module [its args]

As mpi4py's runner (``python -m mpi4py``): an exception the script does not catch, on
any rank, prints its traceback there and ends the whole job (``MPI_Abort``), since the
other ranks could wait for that rank forever. Except for the ends every rank reaches
together, where nobody waits: a signal's stop at the agreed round
(:class:`~mpi_teleport.runtime.signals.Stopped`, or the ``KeyboardInterrupt`` of a
Ctrl-C), and a refusal every rank made (an agreed ``UsageError``). Then rank 0 says it in
one line, every rank finalises MPI, and the job ends with the status (75 after a final
checkpoint, 128 + the signal without one, 2 for a refusal) and without the MPI's abort
banner (:mod:`mpi_teleport.runtime.leaving`).
"""
from __future__ import annotations

import sys


def agreed_end(exc: BaseException) -> tuple[int, str | None] | None:
    """(status, the line rank 0 prints, or None where it was printed) for an end every
    rank reached together; None for anything else (mpi4py's runner's way)."""
    from .runtime.signals import Stopped, program_name
    from .errors import UsageError

    if isinstance(exc, Stopped):  # (the API call printed its line)
        return int(exc.code or 0), None
    if isinstance(exc, KeyboardInterrupt) and hasattr(exc, "status"):  # (signals.interrupted)
        return int(exc.status), f"{program_name()}: {exc}"
    if isinstance(exc, UsageError) and exc.agreed:
        return 2, f"{program_name()}: error: {exc}"
    return None


def main(argv: list[str] | None = None) -> None:
    from mpi4py import run as mpi4py_run

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m mpi_teleport.script_runner SCRIPT.py|-m MODULE [ARGS]",
              file=sys.stderr)
        sys.exit(2)
    try:
        mpi4py_run.run_command_line(args)
    except BaseException as exc:
        end = agreed_end(exc)
        if end is None:
            mpi4py_run.set_abort_status(exc if isinstance(exc, (SystemExit, KeyboardInterrupt))
                                        else 1)
            raise
        from .runtime.launched import on_root
        from .runtime.leaving import leave_together

        status, line = end
        if line is not None and on_root():
            print(line, file=sys.stderr, flush=True)
        leave_together(status)


if __name__ == "__main__":
    main()
