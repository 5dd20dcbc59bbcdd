"""The MPI runtime: one rank per node, every rank evaluates the schedule locally.

    mpirun -n 25 python -m mpi_teleport.run [flags]

With no flags it runs Teleportation and Decentralized SGD on the paper's synthetic
problem and prints a table comparing them. Flags are those of the simulator
(``python -m mpi_teleport.run --help``); n is the number of ranks.
"""
from __future__ import annotations

import contextlib
import io
import sys
import traceback
import warnings
from typing import TYPE_CHECKING, cast

from .front import cli, report, spares
from .session import job, runner
from .session.prepare import check_job
from .runtime import signals
from .errors import DatasetMissingError, NonFiniteError, OutputError, TooFewSurvivors, UsageError
from .runtime.leaving import leave_together
from .runtime.memory import keep_freed_memory
from .parsers import version_line
from .problems import make_problem, needs_local_rank
from .runtime.transport import Transport, abort_job

if TYPE_CHECKING:
    from .session.disk_check import Prepared
    from .session.settings import Values

PROG = "mpirun -n N python -m mpi_teleport.run"


def run_on_ranks(cfg, algorithm: str, k, transport: Transport, progress=None,
                 terminator=None, pool=None, local=None,
                 meeting: runner.Meeting | None = None, prepared=None) -> dict | None:
    """One run over the communicator; rank 0 writes the files and returns the summary.
    A problem that cannot be built on some rank (node-local data missing, no GPU) stops
    every rank with one line: the ranks agree on it before anything else. ``pool``: the
    job's hot spares (``--spares``); ``local``: this rank's index on its host, when known;
    ``meeting``: the survivors' (elastic: a run that ends in an exception after a loss
    hands it their communicator, :class:`~mpi_teleport.elastic.meeting.Meeting`);
    ``prepared``: the job's preparation (:func:`mpi_teleport.session.prepare.check_job`;
    None: made here)."""
    problem, error, stopped = None, None, 0
    prepared = prepared or check_job(cfg)
    if local is None:  # (collective: before failing)
        local = transport.local_rank() if needs_local_rank(cli.problem_of(cfg)) else 0
    try:
        with signals.interruptible():  # (a slow factory: a signal need not wait for it)
            problem = make_problem(cli.problem_of(cfg), local, local_nodes=[transport.rank])  # its data only
    except (UsageError, DatasetMissingError) as exc:
        error = str(exc)
    except signals.SetupInterrupted as stop:
        stopped = stop.signum
    refused, stopped = signals.agree_on_error(transport, error, stopped)
    if refused:
        raise UsageError(refused)
    if stopped:  # (every rank: a rank not signalled stops with the others)
        raise cli.stopped_in_setup(cfg, algorithm, stopped, terminator, prepared)
    context = runner.RunContext(terminator=terminator, pool=pool, progress=progress,
                                meeting=meeting)
    return cli.run_one(cfg, algorithm, k, problem, transport, prepared, context)


def main(argv=None) -> int:
    if "--version" in (sys.argv[1:] if argv is None else argv):  # (without starting MPI)
        print(version_line("python -m mpi_teleport.run"))
        return 0
    terminator = signals.Terminator().install()  # SIGTERM/SIGUSR1: checkpoint, exit 75
    from mpi4py import MPI  # (MPI_Init: slow on a loaded host, the handler is already there)

    comm = MPI.COMM_WORLD
    keep_freed_memory()  # recycle per-round buffers instead of page-faulting fresh ones
    rank = comm.Get_rank()
    parser = cli.build_parser(
        PROG,
        "Run Teleportation or Decentralized SGD with one MPI rank per node.",
        "Examples:\n  mpirun -n 25 python -m mpi_teleport.run\n"
        "  mpirun -n 25 python -m mpi_teleport.run --algorithm teleportation --k 4 "
        "--topology base2 --out runs/x\n"
        "Outputs (with --out, written by rank 0): config.json, metrics.jsonl, summary.json.",
    )
    cfg, prepared, error, release, pool = None, None, None, lambda: None, None
    meeting = runner.Meeting()  # (elastic: the survivors meet before they leave)
    try:
        quiet = contextlib.redirect_stdout(io.StringIO()) if rank else contextlib.nullcontext()
        with quiet, warnings.catch_warnings():  # --help prints once; no warning ahead of a refusal
            warnings.simplefilter("ignore")
            cfg = cli.from_args(argv, world_size=comm.Get_size(), parser=parser)
            prepared = check_job(cfg)  # (the disk, the plans: the API's step too)
    except UsageError as exc:  # (reported below, after every rank has had its say)
        error = str(exc)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        # The first communication: every rank valid, same config and schedule as rank 0.
        transport = Transport(comm)
        refused = cli.agree_on_config(transport, cfg, error)
        if refused:
            return cli.fail(PROG, refused, show=rank == 0)
        cfg = cast("Values", cfg)  # (not refused: every rank parsed it)
        # Rank 0 holds --out and --checkpoint-dir for the job; every rank learns a refusal
        # (another job holds them) in the same collective, so none waits for the others
        # (the API's path too: a refusal is a UsageError on every rank, reported below).
        prepared = cast("Prepared", prepared)
        release = runner.hold_agreed(prepared.hold, transport, rank == 0) or release
        summaries: list[dict | None] = []
        local = None
        if cfg.elastic and cfg.spares:  # hot spares: S ranks wait outside the rounds
            pool, local, transport = spares.apart(cfg, comm)
        if pool is not None and pool.node is None:
            summary = spares.serve(cfg, pool, cast(int, local), terminator,  # (set with the pool)
                                   meeting, prepared)
            if summary is None:  # released by the nodes (or a signal): this spare ends here
                spares.leave(pool.released)
            summaries.append(summary)
        else:
            for algorithm, k in job.runs_requested(cfg):
                progress = cli.progress_for(cfg, algorithm, rank0=rank == 0)
                summaries.append(run_on_ranks(cfg, algorithm, k, transport, progress, terminator,
                                              pool, local, meeting, prepared))
        if _prints(comm, summaries, pool):  # (comparison.json too: while held)
            # (the printing process: a summary of every run)
            text = report.finish(cfg, cast(list[dict], summaries),
                                 report.header(cfg, f"MPI, n={cfg.nodes} ranks"))
    except (UsageError, NonFiniteError, DatasetMissingError) as exc:  # every rank alike
        status = cli.fail(PROG, str(exc), show=rank == 0 if pool is None else pool.root)
        if pool is not None:  # (the spares wait for the nodes' word)
            release()
            spares.end_with_spares(pool, status, meeting, transport)
        if isinstance(exc, NonFiniteError) and cfg is not None and cfg.elastic:
            spares.leave(status)  # (ranks may have died: MPI_Finalize could wait for them)
        return status
    except OutputError as exc:  # a full disk, seen by the ranks that write: one line, and
        # the job ends (the others may be waiting in a collective)
        cli.fail(PROG, f"rank {rank}: {exc}")
        abort_job(comm, 1)
        return 1
    except signals.Terminated as exc:  # every rank, at the same round
        if rank == 0 if pool is None else pool.root:
            print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        if pool is not None:
            release()
            spares.end_with_spares(pool, signals.exit_status(exc), meeting, transport)
        return signals.exit_status(exc)
    except TooFewSurvivors as exc:  # elastic: every survivor, at the same round
        release()
        if exc.root:  # (the survivors' root)
            print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        meeting.meet()  # (no survivor leaves before the line is out)
        if pool is not None:
            pool.release(signals.EXIT_CHECKPOINTED)
        spares.leave(signals.EXIT_CHECKPOINTED)
    except BaseException:  # any failure on any rank ends the whole job, shown once
        sys.stderr.write(f"[rank {rank}] {traceback.format_exc()}")
        sys.stderr.flush()
        abort_job(comm, 1)
        return 1
    finally:
        release()
    lost = {x["node"] for summary in summaries if summary for x in summary.get("lost") or ()}
    if _prints(comm, summaries, pool):  # (elastic: the lowest survivor)
        print(text, flush=True)
    if pool is not None:  # the waiting spares end with the run
        pool.release(0)
        spares.leave(0)
    if lost:
        spares.leave(0)
    return 0


def _prints(comm, summaries, pool) -> bool:
    """Whether this process prints the table: rank 0, or in elastic mode the lowest
    survivor (with spares: the nodes' root)."""
    if pool is not None:
        return pool.root
    lost = {x["node"] for summary in summaries if summary for x in summary.get("lost") or ()}
    return comm.Get_rank() == min(set(range(comm.Get_size())) - lost)


if __name__ == "__main__":
    # every return of main() is an end all ranks agreed on: they leave in order, so the
    # launcher shows the status without its banner (runtime/leaving.py)
    leave_together(main())
