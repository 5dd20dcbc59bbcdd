"""Command line shared by ``python -m mpi_teleport.sim`` and ``mpirun ... python -m
mpi_teleport.run``: the same flags, the same ``--config FILE.toml`` (flags override the
file) and the same bad-input behaviour: one line on stderr, exit status 2."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .config import OPTIONS, Config, UsageError, from_toml
from ..runtime.signals import EXIT_USAGE

if TYPE_CHECKING:
    from ..checkpoint import CheckpointPlan
    from ..core.spec import LatencySettings, Logging, RunSpec


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
    for opt in OPTIONS:
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
    from .config import OPTION_BY_NAME, coerce

    ns = vars(parser.parse_args(argv))
    raw = from_toml(ns.pop("config")) if "config" in ns else {}
    for name, value in ns.items():
        raw[name] = coerce(OPTION_BY_NAME[name], value, "command line")
    return preflight.load(raw, world_size)


def fail(prog: str, message: str, show: bool = True) -> int:
    """Print the one-line error (on the printing rank only) and return exit status 2."""
    if show:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def stopped_in_setup(cfg, algorithm: str, k, signum: int, terminator=None):
    """The :class:`Terminated` of a run whose set-up a signal interrupted (every process
    alike): nothing ran, so nothing is written; a resumed run's checkpoint still stands
    (status 75, resume it again), else status 128 + the signal. The stop is final."""
    from pathlib import Path

    from . import preflight
    from ..runtime.signals import Terminated

    if terminator is not None:
        terminator.commit()
    plan = preflight.checkpoint_plan(cfg, algorithm) if k != "auto" else None
    resumed = plan is not None and plan.manifest is not None
    # (resumed: a plan; `and plan is not None` repeats it for the type checker)
    return Terminated(signum, plan.start if resumed and plan is not None else 0,
                      plan.source if resumed and plan is not None else None,
                      cfg.out if cfg.out is None else Path(cfg.out), before_start=True)


# ----------------------------------------------------------------------------- config -> run
def run_spec(cfg, algorithm: str, k):
    """The RunSpec of one run a Config asks for (``k`` 'auto': Algorithm 2)."""
    from ..core.spec import RunSpec, cosine_lr

    name = "search" if k == "auto" else algorithm
    total = 2 * cfg.rounds if k == "auto" else cfg.rounds
    lr = cfg.lr if cfg.lr_schedule == "constant" else cosine_lr(cfg.lr, total)
    tokens = None if k == "auto" else (cfg.nodes if algorithm == "dsgd" else k)
    return RunSpec(name, cfg.nodes, tokens, cfg.rounds, lr, cfg.momentum, cfg.topology,
                   cfg.variant, cfg.seed, cfg.k_select)


@dataclass
class RunInputs:
    """What the engine needs of one run of a Config (``run_config``; the same for a hot
    spare that takes a node over mid-run, ``join_config``)."""

    spec: RunSpec
    logging: Logging
    latency: LatencySettings
    plan: CheckpointPlan | None
    record: dict
    phases: dict
    failures: tuple


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


def run_inputs(cfg, algorithm: str, k, problem, mpi: bool) -> RunInputs:
    """The spec, logging, checkpoint plan and config.json record of one run of ``cfg``."""
    from . import preflight
    from ..runtime.elastic import parse_failures
    from ..problems import describe, factory, is_factory, with_epochs
    from ..core.spec import LatencySettings, Logging

    rounds_given = cfg.rounds
    used = factory.record(cfg.problem, cfg, mpi) if is_factory(cfg.problem) else None
    cfg = with_epochs(cfg, algorithm, k, problem)  # (a factory's problem: its batch size)
    spec = run_spec(cfg, algorithm, k)
    backend = "mpi" if mpi else "sim"
    k_shown = cfg.nodes if algorithm == "dsgd" else k
    phases = {}
    if k == "auto":  # how many rounds each phase runs, and why (--epochs or --rounds)
        phases = phase_rounds(cfg, rounds_given, getattr(problem, "n_train", None))
    record = {**cfg.to_dict(), "algorithm": algorithm, "k": k_shown, "backend": backend,
              **phases, **describe(problem)}
    if used is not None:  # what the factory received; flags it did not take left out
        unused = set(used["unused"]) - ({"batch_size"} if cfg.epochs is not None else set())
        record = {key: value for key, value in record.items() if key not in unused}
        record["factory_args"] = used["factory_args"]
    logging = Logging(cfg.log_every, cfg.target, cfg.stop_at_target)
    latency = LatencySettings(cfg.latency, cfg.clock, cfg.compute_time)
    plan = preflight.checkpoint_plan(cfg, algorithm) if k != "auto" else None
    failures = parse_failures(list(cfg.fail or ()), cfg.nodes, cfg.spares)
    return RunInputs(spec, logging, latency, plan, record, phases, failures)


def run_config(cfg, algorithm: str, k, *, transport=None, files=None, progress=None,
               terminator=None, problem=None, pool=None, meeting=None) -> dict | None:
    """One run of a Config (one algorithm of ``compare``) through the engine; returns the
    summary on the root (None elsewhere). ``transport``: the MPI runtime's; None: the
    simulator. ``pool``: the job's hot spares (MPI, ``--spares``); ``meeting``: the
    survivors' (a :class:`runner.Meeting`, elastic under MPI)."""
    from . import runner

    got = run_inputs(cfg, algorithm, k, problem, transport is not None)
    result = runner.train(problem, got.spec, got.logging, got.latency, transport=transport,
                          plan=got.plan, settings=cfg.to_dict(), progress=progress or False,
                          terminator=terminator, resume_from=cfg.out, problem_name=cfg.problem,
                          files=files, config_record=got.record,
                          summary_extra=got.phases,  # (rounds per phase: also summary.json)
                          elastic=bool(cfg.elastic or got.failures), failures=got.failures,
                          spares=cfg.spares, pool=pool, agree_every=cfg.agree_every,
                          meeting=meeting)
    return result.summary


def join_config(cfg, algorithm: str, k, problem, pool, reformed, out, terminator=None,
                meeting=None):
    """A hot spare that took a node over (``reformed``: what ``pool.reform`` returned):
    the rest of the run of ``cfg`` as that node; returns the summary. ``meeting``: the
    survivors' (:class:`runner.Meeting`)."""
    from . import runner

    got = run_inputs(cfg, algorithm, k, problem, True)
    r = pool.round  # (the survivors' round, from the message that woke this spare)
    result = runner.join(problem, got.spec, got.logging, pool, r, reformed, out=out,
                         plan=got.plan, settings=cfg.to_dict(), terminator=terminator,
                         resume_from=cfg.out, problem_name=cfg.problem,
                         summary_extra=got.phases, agree_every=cfg.agree_every,
                         meeting=meeting)
    return result.summary
