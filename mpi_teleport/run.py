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
import time
import traceback

from . import checkpoint, cli, latency, report, schedule, signals
from .algorithms import learning_rate
from .algorithms.teleportation import Node, new_state, run_overlap, run_simple
from .config import UsageError
from .memory import keep_freed_memory
from .metrics import NonFiniteError, Recorder, is_log_round, logged_on_root
from .output import RunFiles
from .problems import describe, make_problem, with_epochs
from .problems.datasets import DatasetMissingError
from .progress import Progress
from .transport import Transport

PROG = "mpirun -n N python -m mpi_teleport.run"


def execute(cfg, algorithm: str, k: int, transport: Transport, progress=None,
            terminator=None) -> dict | None:
    """One run over the communicator; rank 0 writes the files and returns the summary.
    Checkpoints, resume and the stop on a signal: checkpoint.Keeper (``terminator``:
    a signals.Terminator, or None to ignore signals)."""
    problem, error = None, None
    try:  # a rank may meet this alone (node-local data, a node without GPUs): agree first
        problem = make_problem(cfg, transport.comm)
    except (UsageError, DatasetMissingError) as exc:
        error = str(exc)
    refused = signals.agree_on_error(transport.comm, error)
    if refused:
        raise UsageError(refused)
    cfg = with_epochs(cfg, algorithm, k, problem)
    if progress is not None:
        progress.plan(cfg, k)
    n, root = cfg.nodes, transport.rank == 0
    if algorithm == "dsgd":
        k = n
        fixed = schedule.fixed_holders(n)
        placement = lambda t: fixed  # noqa: E731
    else:
        placement = lambda t: schedule.holders(cfg.seed, n, k, t)  # noqa: E731
    transport, timed = latency.attach(cfg, transport, problem)  # latency layer, if asked (§6)
    node = Node(transport.rank, timed, transport, placement, k, cfg.topology, learning_rate(cfg),
                cfg.momentum)
    files = RunFiles(report.out_dir(cfg, algorithm) if root else None)
    files.config({**cfg.to_dict(), "algorithm": algorithm, "k": k, "backend": "mpi", **describe(problem)})
    if k == "auto":  # Algorithm 2
        from .search import mpi_search

        return mpi_search(cfg, timed, transport, files, progress)
    rec = Recorder(cfg, problem, files, algorithm, k, progress if root else None)
    x0 = problem.initial()
    state = new_state(node, x0)
    keeper = checkpoint.Keeper(cfg, algorithm, k, terminator, transport)
    simple = algorithm == "teleportation" and cfg.variant == "simple"
    keeper.restore_mpi(node, state, rec, simple)  # resume: this rank's token, the records

    def on_round(r: int, roster, x, run=0) -> bool:
        if not is_log_round(r, cfg.log_every, cfg.rounds):
            return False
        paused = rec.pause()
        elapsed = rec.elapsed() if root else 0.0
        extra = latency.record_extra(transport)  # virtual_time_s (collective) when on
        rows = transport.gather_rows(x, roster[0], problem.dim, problem.dtype)
        try:
            return logged_on_root(transport, lambda: rec.log(r, rows, elapsed, extra))
        finally:
            rec.resume(paused)

    on_round = keeper.wrap(on_round, node, state, rec, cfg.rounds)  # signals, checkpoints
    start = time.perf_counter() - keeper.wall_offset
    transport.barrier()
    if not keeper.resumed:  # (a resumed run has logged its first round already)
        roster0 = node.roster(0)
        on_round(0, roster0, state.x if node.role(roster0)[1] >= 0 else None)
    loop = run_simple if simple else run_overlap
    loop(node, keeper.rounds(cfg.rounds), state, on_round)
    wall = time.perf_counter() - start
    summary = rec.summary(wall, {"backend": "mpi"}) if root else None
    keeper.finish(summary)  # the final checkpoint, with --checkpoint-every
    return summary


def main(argv=None) -> int:
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
    cfg, error = None, None
    try:
        quiet = contextlib.redirect_stdout(io.StringIO()) if rank else contextlib.nullcontext()
        with quiet:  # --help prints once
            cfg = cli.parse(parser, argv, world_size=comm.Get_size())
    except UsageError as exc:  # (reported below, after every rank has had its say)
        error = str(exc)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        # The first communication: every rank valid, same config and schedule as rank 0.
        refused = signals.agree_on_start(comm, cfg, error)
        if refused:
            return cli.fail(PROG, refused, show=rank == 0)
        if any(k == "auto" for _, k in report.runs_requested(cfg)):
            terminator.release()  # Algorithm 2 takes no checkpoints: signals end it at once
        transport = Transport(comm)
        summaries = []
        for algorithm, k in report.runs_requested(cfg):
            progress = Progress.for_run(cfg, algorithm, rank0=rank == 0)
            summaries.append(execute(cfg, algorithm, k, transport, progress, terminator))
    except (UsageError, NonFiniteError, DatasetMissingError) as exc:  # every rank alike
        return cli.fail(PROG, str(exc), show=rank == 0)
    except signals.Terminated as exc:  # every rank, at the same round
        if rank == 0:
            print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        return signals.exit_status(exc)
    except BaseException:  # any failure on any rank ends the whole job, shown once
        sys.stderr.write(f"[rank {rank}] {traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(1)
        return 1
    if rank == 0:
        print(report.finish(cfg, summaries, report.header(cfg, f"MPI, n={cfg.nodes} ranks")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
