"""Command line shared by ``python -m mpi_teleport.sim`` and ``mpirun ... python -m
mpi_teleport.run``: the same flags, the same ``--config FILE.toml`` (flags override the
file) and the same bad-input behaviour: one line on stderr, exit status 2."""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import cast

import numpy as np

from ..session.flags import build_parser, raw_of, with_config
from ..session.settings import Values, agreed
from ..runtime.collective import first_error, ranks_text
from ..runtime.signals import EXIT_USAGE


def parse(parser: argparse.ArgumentParser, argv, world_size: int | None = None) -> Values:
    """Flags (over the TOML file, over defaults) -> validated Values checked against the
    disk (the preflight), or UsageError."""
    from ..session import preflight

    raw, _ = raw_of(parser, argv)
    return preflight.load(raw, world_size)




def from_args(argv, toml=None, *, world_size: int | None = None,
              parser: argparse.ArgumentParser | None = None) -> Values:
    """The command lines' one entry to their settings: the flags ``argv`` over the TOML
    file ``toml`` (or the flags' own ``--config FILE.toml``, which wins) over the table's
    defaults, checked by the table's rules and against the disk (a ``--resume`` supplies
    the settings it leaves out), as the job's :class:`~.settings.Values` (every row),
    what the Python API makes of its keywords too. ``world_size``: the MPI job's ranks
    (None: the simulator); ``parser``: the front end's (:func:`build_parser`; its
    program name is in the help only). UsageError (one line) for bad input. Each run of
    the job is then :func:`mpi_teleport.session.prepare.prepare` ``(problem,
    run_values(values, algorithm, k), comm, prepared=..., job=values)``, the
    :class:`~mpi_teleport.session.prepare.RunSettings` that :func:`mpi_teleport.train`
    takes, made as the Python API makes its own (``RunSettings.from_args`` does all of
    it for a script's one run, :mod:`mpi_teleport.session.script`).

    >>> from mpi_teleport.front.cli import from_args
    >>> from_args(["--nodes", "8", "--k", "2", "--lr", "0.05"]).to_dict()["k"]
    2
    """
    return parse(parser or build_parser("mpi_teleport", ""), with_config(argv, toml),
                 world_size)




def fail(prog: str, message: str, show: bool = True) -> int:
    """Print the one-line error (on the printing rank only) and return exit status 2."""
    if show:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def stopped_in_setup(cfg, algorithm: str, signum: int, terminator, prepared):
    """The :class:`Terminated` of a run whose set-up a signal interrupted (every process
    alike): nothing ran, so nothing is written; a resumed run's checkpoint still stands
    (status 75, resume it again), else status 128 + the signal. The stop is final.
    ``prepared``: the job's disk check (:func:`~mpi_teleport.session.prepare.check_job`)."""
    from pathlib import Path

    from ..runtime.signals import Terminated

    if terminator is not None:
        terminator.commit()
    plan = prepared.plan(algorithm)
    resumed = plan is not None and plan.manifest is not None
    # (resumed: a plan; `and plan is not None` repeats it for the type checker)
    return Terminated(signum, plan.start if resumed and plan is not None else 0,
                      plan.source if resumed and plan is not None else None,
                      cfg.out if cfg.out is None else Path(cfg.out), before_start=True)


# ----------------------------------------------------------------------------- start-up
def fingerprint(cfg) -> dict:
    """What every rank must share: the resolved config, the schedule of the first rounds,
    a few keyed random numbers, and the versions that compute them."""
    from .._version import __version__
    from ..core import rng, schedule
    from ..session.job import runs_requested

    h = hashlib.sha256()
    for algorithm, k in runs_requested(cfg):
        h.update(algorithm.encode())
        if algorithm == "teleportation" and k != "auto":
            for t in range(4):
                h.update(schedule.holders(cfg.seed, cfg.nodes, cast(int, k), t).tobytes())
        elif k == "auto":
            for t in range(2):
                for block in schedule.search_blocks(cfg.seed, cfg.nodes, t):
                    h.update(block.tobytes())
    h.update(rng.normals(rng.key(cfg.seed, rng.STREAM_NOISE, 0), [0, cfg.nodes - 1], 4).tobytes())
    settings = agreed(cfg.to_dict())  # (the table's rows every rank must hold alike)
    return {
        "config": settings,
        "config_hash": hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest(),
        "schedule": h.hexdigest(),
        "versions": f"mpi_teleport {__version__}, numpy {np.__version__}",
    }


def agree_on_config(transport, cfg, error: str | None) -> str | None:
    """The command line's start-up agreement under MPI, one allgather: returns the message every rank must stop with (rank 0 prints it),
    or None when all ranks parsed the same valid configuration and schedule."""
    mine = {"error": error, **(fingerprint(cfg) if cfg is not None and error is None else {})}
    everyone = transport.allgather(mine)
    refused = first_error([info["error"] for info in everyone])
    if refused:
        return refused
    ref = everyone[0]
    for key in ("config_hash", "schedule"):
        differ = [r for r, info in enumerate(everyone) if info[key] != ref[key]]
        if not differ:
            continue
        other = everyone[differ[0]]
        who = f"rank {differ[0]}" if len(differ) == 1 else f"ranks {ranks_text(differ)}"
        verb = "holds" if len(differ) == 1 else "hold"
        if key == "config_hash":
            names = sorted(n for n in set(ref["config"]) | set(other["config"])
                           if ref["config"].get(n) != other["config"].get(n))
            detail = "; ".join(f"{n} = {other['config'].get(n)!r} on rank {differ[0]}, "
                               f"{ref['config'].get(n)!r} on rank 0" for n in names[:3])
            return (f"{who} {verb} another configuration than rank 0 ({detail}): start every "
                    f"rank with the same flags and config file")
        versions = (f"{other['versions']} on rank {differ[0]}, {ref['versions']} on rank 0"
                    if other["versions"] != ref["versions"] else f"both {ref['versions']}")
        return (f"{who} {'computes' if len(differ) == 1 else 'compute'} another schedule than "
                f"rank 0 from the same configuration ({versions}): install the same software "
                f"on every node")
    return None


def progress_for(cfg, label: str, rank0: bool = True):
    """The bar of one run: shown on rank 0 with ``--progress on``, or ``auto`` when stderr
    is a terminal (its length is set when the run starts)."""
    from ..runtime.progress import Progress, shows

    show = rank0 and shows(cfg.progress)
    return Progress(label, show)


# ----------------------------------------------------------------------------- config -> run
def problem_of(cfg):
    """What building a job's problem needs of its values
    (:func:`mpi_teleport.problems.problem_settings` of its values, ``given`` the
    settings away from the table's defaults), for
    :func:`mpi_teleport.problems.make_problem`."""
    from ..problems import problem_settings
    from ..session.settings import defaults

    return problem_settings(cfg.to_dict(), defaults())


def run_values(cfg, algorithm: str, k):
    """The values of one run of a job (one algorithm of ``compare``; ``k`` 'auto':
    Algorithm 2): the job's, with the run's algorithm and k (n for DSGD), what
    :func:`mpi_teleport.session.prepare.prepare` takes beside the job's own."""
    return cfg.replace(algorithm=algorithm, k=cfg.nodes if algorithm == "dsgd" else k)


def run_one(cfg, algorithm: str, k, problem, comm, prepared, context) -> dict | None:
    """One run of a command line's job with its problem built, the one way the simulator,
    the MPI runtime and a hot spare that took a node over run it: the run's values
    (:func:`run_values`) prepared as any front end's are
    (:func:`mpi_teleport.session.prepare.prepare`, ``job=cfg``: both runs of compare
    keep the job's settings in their checkpoints), then the public
    :func:`mpi_teleport.train`, as a user's script calls it, with the caller's
    ``context`` (a :class:`~mpi_teleport.session.runner.RunContext`). Algorithm 2 (``k``
    'auto') takes no checkpoints, so a signal ends it at once. Returns the summary (the
    root's; None on the other ranks)."""
    from .. import api
    from ..session.prepare import prepare

    if k == "auto" and context.terminator is not None:
        context.terminator.release()
    settings = prepare(problem, run_values(cfg, algorithm, k), comm, prepared=prepared,
                       job=cfg)
    return api.train(problem, settings, comm, context).summary


def run_spec(cfg, algorithm: str, k, problem=None):
    """The RunSpec of one run a job's values ask for (``k`` 'auto': Algorithm 2), by the
    one builder both front ends use (:func:`mpi_teleport.session.build.spec_of`);
    ``problem``: the run's (an optimizer's weight decay applies to its parameters only)."""
    from ..session.build import spec_of

    return spec_of(run_values(cfg, algorithm, k), problem)
