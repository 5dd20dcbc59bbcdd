"""Single-process simulator: all n nodes in one process, vectorised over tokens.

Same schedule, topologies, problems, seeds, engine and output files as the MPI runtime
(only how vectors move differs: :mod:`mpi_teleport.runtime.backends.local`); it is the oracle for
tests, a cheap preview before a cluster job, and the way to study n far beyond the ranks
at hand.

    python -m mpi_teleport.sim --nodes 100 --k 4 --topology ring --out runs/demo
"""
from __future__ import annotations

import sys
import warnings
from typing import cast

from .front import cli, report
from .session import job, runner
from .session.prepare import check_job
from .runtime import signals
from .errors import TooFewSurvivors
from .errors import DatasetMissingError, NonFiniteError, OutputError, UsageError
from .runtime.memory import keep_freed_memory
from .disk.output import RunFiles
from .problems import make_problem
from .runtime.progress import Progress

PROG = "python -m mpi_teleport.sim"


def simulate(cfg, algorithm: str, k, files: RunFiles | None = None,
             progress: Progress | None = None, terminator=None, prepared=None) -> dict:
    """Run Teleportation (k tokens, or 'auto' for Algorithm 2) or Decentralized SGD (k = n,
    fixed placement) of a job's values in this process; returns the summary. ``prepared``: the
    job's preparation (:func:`mpi_teleport.session.prepare.check_job`; None: made here)."""
    keep_freed_memory()
    prepared = prepared or check_job(cfg)
    try:
        with signals.interruptible():  # (a slow factory: a signal need not wait for it)
            problem = make_problem(cli.problem_of(cfg))
    except signals.SetupInterrupted as stop:
        raise cli.stopped_in_setup(cfg, algorithm, stop.signum, terminator, prepared) from None
    context = runner.RunContext(terminator=terminator, progress=progress, files=files)
    return cast(dict, cli.run_one(cfg, algorithm, k, problem, None, prepared, context))


def main(argv=None) -> int:
    parser = cli.build_parser(
        PROG,
        "Simulate Teleportation and Decentralized SGD with all n nodes in one process.",
        "Example:\n  python -m mpi_teleport.sim --nodes 100 --k 4 --topology base2 --out runs/x\n"
        "Outputs (with --out): config.json, metrics.jsonl, summary.json "
        "(compare: one subdirectory per algorithm).",
    )
    release = None
    try:
        with signals.Terminator() as terminator:  # SIGTERM/SIGUSR1: checkpoint, exit 75
            with warnings.catch_warnings():  # nothing printed ahead of a refusal's one line
                warnings.simplefilter("ignore")
                cfg = cli.from_args(argv, parser=parser)
            prepared = check_job(cfg)  # (the disk, the plans: the API's step too)
            # --out, --checkpoint-dir: this job's alone (the one lock function, one process)
            release = runner.hold_agreed(prepared.hold, None, True)
            summaries = []
            for algorithm, k in job.runs_requested(cfg):
                progress = cli.progress_for(cfg, algorithm)
                summaries.append(simulate(cfg, algorithm, k, None, progress, terminator,
                                          prepared))
            # (comparison.json too is written while the directory is held)
            text = report.finish(cfg, summaries, report.header(cfg, f"simulator, n={cfg.nodes}"))
    except (UsageError, NonFiniteError, DatasetMissingError) as exc:
        return cli.fail(PROG, str(exc))
    except OutputError as exc:  # a full disk: one line, status 1 (the run itself failed)
        cli.fail(PROG, str(exc))
        return 1
    except signals.Terminated as exc:
        print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        return signals.exit_status(exc)
    except TooFewSurvivors as exc:  # --fail left fewer nodes than tokens
        print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        return signals.EXIT_CHECKPOINTED
    finally:
        if release is not None:
            release()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
