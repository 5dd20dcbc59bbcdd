"""Command line shared by ``python -m mpi_teleport.sim`` and ``mpirun ... python -m
mpi_teleport.run``: the same flags, the same ``--config FILE.toml`` (flags override the
file) and the same bad-input behaviour: one line on stderr, exit status 2."""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from typing import Any, cast

import numpy as np

from .settings import CLI, Config, UsageError, agreed, from_toml, rows
from ..problems import is_factory
from ..runtime.collective import first_error, ranks_text
from ..runtime.signals import EXIT_USAGE



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


def parse(parser: argparse.ArgumentParser, argv, world_size: int | None = None) -> Config:
    """Flags (over the TOML file, over defaults) -> validated Config checked against the
    disk (the preflight), or UsageError."""
    from . import preflight
    from .settings import coerce, setting

    ns = vars(parser.parse_args(argv))
    raw = from_toml(ns.pop("config")) if "config" in ns else {}
    for name, value in ns.items():
        raw[name] = coerce(setting(name), value, "command line")
    return preflight.load(raw, world_size)


def from_args(argv, toml=None, *, world_size: int | None = None,
              parser: argparse.ArgumentParser | None = None) -> Config:
    """The command lines' one entry to their settings: the flags ``argv`` over the TOML
    file ``toml`` (or the flags' own ``--config FILE.toml``, which wins) over the table's
    defaults, checked by the table's rules and against the disk (a ``--resume`` supplies
    the settings it leaves out), as the job's :class:`~.settings.Config`: a frozen view
    of its values named as the table's rows. ``world_size``: the MPI job's ranks (None:
    the simulator); ``parser``: the front end's (:func:`build_parser`; its program name
    is in the help only). UsageError (one line) for bad input. Each run of the job is
    then :func:`settings_of` ``(cfg, algorithm, k, problem)``, the
    :class:`~mpi_teleport.front.runner.RunSettings` that :func:`mpi_teleport.train`
    takes, built by the builder the Python API uses.

    >>> from mpi_teleport.front.cli import from_args
    >>> from_args(["--nodes", "8", "--k", "2", "--lr", "0.05"]).to_dict()["k"]
    2
    """
    import os

    parser = parser or build_parser("mpi_teleport", "")
    argv = list(sys.argv[1:] if argv is None else argv)
    if toml is not None:
        argv = ["--config", os.fspath(toml), *argv]
    return parse(parser, argv, world_size)


def fail(prog: str, message: str, show: bool = True) -> int:
    """Print the one-line error (on the printing rank only) and return exit status 2."""
    if show:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def stopped_in_setup(cfg, algorithm: str, signum: int, terminator=None, prepared=None):
    """The :class:`Terminated` of a run whose set-up a signal interrupted (every process
    alike): nothing ran, so nothing is written; a resumed run's checkpoint still stands
    (status 75, resume it again), else status 128 + the signal. The stop is final.
    ``prepared``: the job's preparation (:func:`~mpi_teleport.front.preflight.prepared`;
    None: made here)."""
    from pathlib import Path

    from . import preflight
    from ..runtime.signals import Terminated

    if terminator is not None:
        terminator.commit()
    plan = (prepared or preflight.prepared(cfg)).plan(algorithm)
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
    from .report import runs_requested

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
    from ..runtime.progress import Progress

    show = rank0 and (cfg.progress == "on" or (cfg.progress == "auto" and sys.stderr.isatty()))
    return Progress(label, show)


# ----------------------------------------------------------------------------- config -> run
def problem_of(cfg):
    """What building a job's problem needs of its Config
    (:func:`mpi_teleport.problems.problem_settings` of its values, ``given`` the
    settings away from the table's defaults), for
    :func:`mpi_teleport.problems.make_problem`."""
    from ..problems import problem_settings
    from .settings import defaults

    return problem_settings(cfg.to_dict(), defaults())


def run_spec(cfg, algorithm: str, k, problem=None):
    """The RunSpec of one run a Config asks for (``k`` 'auto': Algorithm 2), built by the
    one builder both front ends use (:func:`mpi_teleport.front.build.run_spec`);
    ``problem``: the run's (an optimizer's weight decay applies to its parameters only)."""
    from . import build
    from .loop_options import step_rule

    values = cfg.to_dict()
    momentum, nesterov, rule = step_rule(values, problem)
    per_epoch = None  # (--lr-schedule cosine-warmup: rounds an epoch, as --epochs counts them)
    if cfg.lr_schedule == "cosine-warmup" and getattr(problem, "n_train", None):
        active = cfg.nodes if algorithm == "dsgd" or k == "auto" else k
        per_epoch = problem.n_train / (int(cfg.batch_size) * active)
    return build.run_spec({**values, "algorithm": algorithm, "k": k, "momentum": momentum,
                           "nesterov": nesterov}, rule, per_epoch)


def phase_rounds(cfg, rounds_given: int, n_train) -> dict:
    """How many rounds each phase of ``--k auto`` runs and why (config.json, summary.json);
    ``cfg`` is the Config after --epochs was applied, ``rounds_given`` its --rounds."""
    out = {"rounds_per_phase": cfg.rounds, "phases": 2, "rounds_total": 2 * cfg.rounds}
    if cfg.epochs is None:
        out["rounds_per_phase_from"] = f"--rounds {rounds_given}"
        return out
    out["rounds_per_phase_from"] = (
        f"--epochs: ceil(epochs * n_train / (batch_size * n)) = ceil({cfg.epochs:g} * {n_train} "
        f"/ ({cfg.batch_size} * {cfg.nodes})) = {cfg.rounds}; phase 1 (k = n) processes "
        f"{cfg.epochs:g} epoch(s) in these rounds, phase 2 runs as many rounds, in which "
        f"candidate k processes k/n of that")
    return out


def with_epochs(cfg, algorithm: str, k, problem):
    """--epochs E: the same number of training samples for every method, so a run with
    k active nodes (n for DSGD and for each phase of --k auto) gets
    ceil(E * n_train / (batch_size * k)) rounds."""
    if cfg.epochs is None:
        return cfg
    if getattr(problem, "n_train", None) is None:
        raise UsageError(f"--epochs needs a problem that knows its training-set size "
                         f"(n_train); {cfg.problem} does not: use --rounds")
    batch = getattr(problem, "batch_size", None)  # (a factory's own batch size)
    if batch is None and is_factory(cfg.problem):
        raise UsageError(f"--epochs needs a problem that knows its batch size (batch_size); "
                         f"{cfg.problem} does not: use --rounds")
    batch = int(batch or cfg.batch_size)
    active = cfg.nodes if algorithm == "dsgd" or k == "auto" else k
    return cfg.replace(batch_size=batch,
                       rounds=max(1, math.ceil(cfg.epochs * problem.n_train / (batch * active))))


def with_threads(problem, threads) -> None:
    """``--threads N|auto``: the torch intra-op threads a TorchProblem computes with (its
    own default, 1, when not given); refused for a problem that computes without torch."""
    if threads is None:
        return
    inner = getattr(problem, "problem", problem)
    if getattr(inner, "torch_settings", None) is None:
        raise UsageError(f"--threads {threads}: the problem ({type(inner).__name__}) computes "
                         f"without torch; drop --threads")
    from ..problems.torch_options import TorchSettings

    inner.torch_settings = TorchSettings(threads)


def settings_of(cfg, algorithm: str, k, problem, *, mpi: bool = False, prepared=None):
    """The :class:`~mpi_teleport.front.runner.RunSettings` of one run of a Config (one
    algorithm of ``compare``; ``k`` 'auto': Algorithm 2), built by the one builder both
    front ends use (:func:`mpi_teleport.front.build.build`) from the Config's values: its
    spec (--epochs and the optimizer applied to ``problem``), the checkpoint plan of the
    job's preparation, and config.json (the run's algorithm and k, the back end, the
    problem's facts) beside the manifest (the job's settings), for
    :func:`mpi_teleport.train` (the simulator and the MPI command line call it as a
    user's script would; a hot spare joining the run too). ``mpi``: the MPI runtime's
    (the record says so). What the command line holds for the run (its signal handler,
    hot spares, progress bar, the survivors' meeting) goes in the
    :class:`~mpi_teleport.front.runner.RunContext`. ``prepared``: the job's preparation
    (:func:`~mpi_teleport.front.preflight.prepared`; None: made here)."""
    from . import preflight
    from .build import build
    from .report import out_dir
    from ..problems import describe, factory

    given = cfg
    used = (factory.record(cfg.problem, problem_of(cfg), mpi) if is_factory(cfg.problem)
            else None)
    cfg = with_epochs(cfg, algorithm, k, problem)  # (a factory's problem: its batch size)
    with_threads(problem, cfg.threads)
    spec = run_spec(cfg, algorithm, k, problem)
    phases = {}
    if k == "auto":  # how many rounds each phase runs, and why (--epochs or --rounds)
        phases = phase_rounds(cfg, given.rounds, getattr(problem, "n_train", None))
    # config.json: this run's algorithm and k (n for DSGD) among the job's settings
    values = {**cfg.to_dict(), "algorithm": algorithm,
              "k": cfg.nodes if algorithm == "dsgd" else k}
    facts = {"backend": "mpi" if mpi else "sim", **phases, **describe(problem)}
    if used is not None:  # what the factory received; flags it did not take left out
        unused = set(used["unused"]) - ({"batch_size"} if cfg.epochs is not None else set())
        values = {key: value for key, value in values.items() if key not in unused}
        facts = {key: value for key, value in facts.items() if key not in unused}
        facts["factory_args"] = used["factory_args"]
    plan = (prepared or preflight.prepared(given)).plan(algorithm)
    if cfg.epochs is not None and plan is not None and plan.manifest is not None:
        from .resume import check_rounds  # (preflight could not: the rounds come from the data)

        check_rounds(f"--resume {given.resume}", plan.manifest, spec.rounds,
                     f"--epochs {cfg.epochs:g} ({spec.rounds} rounds)")
    return build(values, spec, naming=CLI, plan=plan, out=out_dir(cfg, algorithm),
                 facts=facts, manifest_values=given.to_dict(), resume_from=cfg.out,
                 problem_name=cfg.problem,
                 summary_extra=phases)  # (rounds per phase: also summary.json)
