"""The Python API's checks and plumbing: every argument of :func:`mpi_teleport.teleportation`,
:func:`~mpi_teleport.dsgd` and :func:`~mpi_teleport.search_k` checked by the command
line's rules (:mod:`mpi_teleport.front.settings`), the inputs on disk checked on every
process (:mod:`mpi_teleport.front.resume`), as one :class:`RunSettings` (and the
:class:`RunContext` carrying a refusal) for :func:`mpi_teleport.train`.

The public functions (:mod:`mpi_teleport.api`) name what runs as the table's rows
(algorithm, nodes, k, rounds, lr, ...), build the option objects
(:mod:`mpi_teleport.front.settings`) and call :func:`checked_settings`, which builds the
:class:`RunSpec` by the command line's builder; nothing here is public.
"""
from __future__ import annotations

from pathlib import Path

from ..runtime import collective
from .build import build, record, run_spec
from .runner import RunContext, RunSettings
from ..core.algorithms import Nesterov
from . import resume as resume_rules
from ..checkpoint.find import auto_resume
from ..checkpoint import CheckpointPlan, locate
from ..errors import UsageError
from .settings import Checkpoints, Latency, Records
from ..disk.paths import absolute
from .prepare import Leg, Places, Prepared, prepare
from ..problem import with_defaults
from .settings import (API, check_checkpoints, check_k, check_spares, check_values,
                       checkpoint_policy, flag, flat_settings)
from ..core.spec import RunSpec


def checked_settings(problem, run: dict, *, rule=None, comm, out, records: Records,
                     checkpoints: Checkpoints, latency: Latency, elastic: bool = False,
                     fail=None, spares: int = 0) -> tuple[RunSettings, RunContext]:
    """The :class:`RunSettings` of an API call and its :class:`RunContext`: every argument checked
    (:mod:`mpi_teleport.front.settings`, the command line's rules, spelt as keywords; ``run``:
    what runs, named as the table's rows: algorithm, nodes, k, rounds, lr, momentum,
    nesterov, topology, variant, seed and, for the search, k_select; ``rule``: the step
    rule of ``optimizer=``), the run's spec built by the builder the command line uses
    (:func:`mpi_teleport.front.build.run_spec`), the
    inputs on disk checked on this process (a resumed checkpoint against these settings
    and file by file, the checkpoint directory free of another run's): a failure of those
    becomes the context's ``refused``, which :func:`mpi_teleport.train` makes one
    UsageError on every process, before anything is written."""
    problem = with_defaults(problem)  # (TypeError naming what is missing)
    spec, places, ck_dir, values = _checked(run, rule, comm, out, records, checkpoints,
                                            latency)
    given = problem.nodes
    if isinstance(given, int) and not isinstance(given, bool) and given != spec.nodes:
        raise UsageError(f"the problem was built for nodes={given} but the run has "
                         f"nodes={spec.nodes}: give both the same number")
    touches = ck_dir is not None or places.resume is not None  # (may write or read one)
    identity = resume_rules.describe_problem(problem, spec.seed, touches)
    from ..runtime.elastic import parse_failures

    spares = check_values({"spares": spares}, API)["spares"]
    check_spares(spares, bool(elastic), bool(fail), API)
    if comm is None:  # (the simulator; under MPI a spare is a rank of the job)
        from .preflight import check_spares_fit

        check_spares_fit(spares, API)
    failures = parse_failures(fail, spec.nodes, spares)  # (mpi_teleport/DESIGN.md §11)
    values = {**values, "algorithm": spec.algorithm, "k": spec.tokens, "lr": spec.lr,
              "lr_schedule": "function" if callable(spec.lr) else "constant",
              "nesterov": isinstance(spec.momentum, Nesterov),
              "out": places.out, "checkpoint_dir": ck_dir, "resume": places.resume,
              "progress": flag(records.progress, "progress", API),
              "elastic": bool(elastic), "spares": spares,
              # the failure plan, when given, as the command line spells it (NODE@ROUND;
              # a resume compares it); none given: a resume goes on from the losses its
              # checkpoint holds
              **({"fail": tuple(f"{f.node}@{f.round}" for f in failures)} if failures else {}),
              **({"k_select": spec.k_select} if spec.algorithm == "search" else {})}
    # the step the command line takes too (front.prepare): a refusal is this process's,
    # which train makes one UsageError on every process in the collective of the locks
    leg = Leg(spec.algorithm, None if spec.algorithm == "search" else spec.tokens, ck_dir)
    refused, prepared = None, Prepared()
    try:
        prepared = prepare([leg], places, nodes=spec.nodes, rounds=spec.rounds,
                           record=record(values, spec.optimizer, identity), naming=API,
                           latency=values["latency"])
        plan = prepared.plan(spec.algorithm)
    except UsageError as exc:
        refused = str(exc)
        plan = CheckpointPlan(ck_dir, places.every, places.keep)  # (not run: train refuses)
    settings = build(values, spec, naming=API, plan=plan, out=places.out, identity=identity,
                     facts={**problem.describe(), **_config_facts(problem)},
                     hold=prepared.hold, callback=records.callback)
    return settings, RunContext(refused=refused)


def _checked(run: dict, rule, comm, out, records: Records, checkpoints: Checkpoints,
             latency: Latency) -> tuple[RunSpec, Places, Path | None, dict]:
    """The run's settings with every value checked by the rules the command line uses
    (spelt as the flat keywords: ``log_every``, also for ``Records(every=...)``), or
    UsageError (one line). Returns also where the run writes and its checkpoint
    directory (given; beside the checkpoint it resumes when that run kept them apart;
    else ``out/checkpoints``)."""
    if comm is not None:  # (before any MPI call could hang on it)
        collective.check_communicator(comm)
    else:
        collective.warn_if_in_mpi_job()  # every process of an mpirun job simulating alone?
    values = check_values({
        **{name: run[name] for name in ("nodes", "rounds", "lr", "momentum", "topology",
                                        "variant", "seed")},
        **flat_settings(records, latency, checkpoints, out),
    }, API)
    flag(records.progress, "progress", API)
    algorithm, k = run["algorithm"], run["k"]
    if algorithm == "teleportation":
        k = check_k(k, values["nodes"], algorithm, API)
    elif algorithm == "dsgd":
        k = values["nodes"]
    check_checkpoints(values, API, search=algorithm == "search")
    # (the one builder of both front ends, from the checked values)
    spec = run_spec({**values, **{name: run[name] for name in ("algorithm", "nesterov",
                                                                "k_select") if name in run},
                     "k": k}, rule)

    def where(name):
        return None if values[name] is None else Path(absolute(name, values[name], API))

    out, ck_dir = where("out"), where("checkpoint_dir")
    if values["resume"] == "auto":  # (continue, return a finished run, or start: find.auto_resume)
        resume = auto_resume(out, ck_dir or (out and out / "checkpoints"), spec.algorithm)
    else:
        resume = where("resume")
    if ck_dir is None and resume is not None and spec.algorithm != "search":
        ck_dir = _continued_dir(resume, spec.algorithm)
    if ck_dir is None and out is not None:
        ck_dir = out / "checkpoints"
    given = where("checkpoint_dir")
    places = Places(out, given, resume, *checkpoint_policy(values))
    return spec, places, ck_dir, values


def _config_facts(problem) -> dict:
    """config.json's facts of the model a problem has to tell (a TorchProblem's class
    name and batch size: ``config_facts()``); not compared by a resume."""
    facts = getattr(getattr(problem, "problem", problem), "config_facts", None)
    return dict(facts()) if callable(facts) else {}


def _continued_dir(resume: Path, algorithm: str) -> Path | None:
    """A resume without ``checkpoint_dir`` of a run that kept its checkpoints apart from its
    files writes the new ones beside those it resumes (:func:`resume.kept_apart`), so the
    next ``resume=`` from there finds the newest; None otherwise (a checkpoint that cannot
    be read is reported by the disk check, in its one line)."""
    try:
        found = locate(resume, algorithm)
    except (UsageError, OSError):
        return None
    apart = None if found is None else resume_rules.kept_apart(found[0])
    return None if apart is None else Path(apart)
