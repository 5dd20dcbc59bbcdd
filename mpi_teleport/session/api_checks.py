"""The Python API's checks and plumbing: every argument of :func:`mpi_teleport.teleportation`,
:func:`~mpi_teleport.dsgd` and :func:`~mpi_teleport.search_k` checked by the command
line's rules (:mod:`mpi_teleport.session.settings`), the inputs on disk checked on every
process (:mod:`mpi_teleport.session.resume`), as the call's
:class:`~mpi_teleport.session.settings.Values` and its disk check, which
:func:`mpi_teleport.session.prepare.prepare` makes the RunSettings of, as it does a
command line's.

The public functions (:mod:`mpi_teleport.api`) name what runs as the table's rows
(algorithm, nodes, k, rounds, lr, ...), build the option objects
(:mod:`mpi_teleport.session.settings`) and call :func:`checked`; nothing here is public.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runtime import collective
from .build import record, spec_of
from ..core.algorithms import Nesterov
from . import resume as resume_rules
from ..checkpoint.find import auto_resume
from ..checkpoint import CheckpointPlan, locate
from ..errors import UsageError
from .settings import Checkpoints, Latency, Records
from ..disk.paths import absolute
from .disk_check import Leg, Places, Prepared, check_disk
from ..problem import with_defaults
from .settings import (API, Values, check_k, check_values, checkpoint_policy, cross_checks,
                       flag, flat_settings)


def checked(problem, run: dict, *, rule=None, comm, out, records: Records,
            checkpoints: Checkpoints, latency: Latency, elastic: bool = False,
            fail=None, spares: int = 0) -> tuple[Values, Prepared, str | None, dict]:
    """An API call's :class:`~.settings.Values` (the rows it takes: every argument checked
    by the command line's rules, :mod:`mpi_teleport.session.settings`, spelt as keywords;
    ``run``: what runs, named as the table's rows: algorithm, nodes, k, rounds, lr,
    momentum, nesterov, topology, variant, seed and, for the search, k_select; ``rule``:
    the step rule of ``optimizer=``, held as the ``optimizer`` row), then its disk
    checked on this process (:func:`mpi_teleport.session.disk_check.check_disk`, the command
    line's step: a resumed checkpoint against these settings and file by file, the
    checkpoint directory free of another run's). Returns the values, what the disk check
    found, its refusal (this process's one-line reason not to run, which
    :func:`mpi_teleport.train` makes one UsageError on every process, before anything is
    written) and the problem's identity the check compared. The call then makes its
    RunSettings as the command lines do, :func:`mpi_teleport.session.prepare.prepare`
    ``(problem, values, comm, prepared=..., identity=...)``."""
    problem = with_defaults(problem)  # (TypeError naming what is missing)
    values, places, ck_dir = _checked(run, rule, comm, out, records, checkpoints, latency)
    spec = spec_of(values)  # (the run's own rules: nesterov needs momentum, ...)
    touches = ck_dir is not None or places.resume is not None  # (may write or read one)
    identity = resume_rules.describe_problem(problem, spec.seed, touches)
    from ..elastic.survivors import parse_failures

    spares = check_values({"spares": spares}, API)["spares"]
    # (the form only, for the command line's spelling; the nodes it names are checked by
    # cross_checks below, as a command line's are: mpi_teleport/DESIGN.md §11)
    failures = parse_failures(fail, naming=API)
    search = spec.algorithm == "search"
    values = values.replace(**{
        "lr_schedule": "function" if callable(spec.lr) else "constant",
        "nesterov": isinstance(spec.momentum, Nesterov),
        # (the checkpoint directory given, as the command line records it; the one the
        # run writes is its plan's)
        "out": places.out, "checkpoint_dir": places.checkpoint_dir, "resume": places.resume,
        "progress": flag(records.progress, "progress", API),
        "elastic": bool(elastic), "spares": spares,
        # the failure plan, when given, as the command line spells it (NODE@ROUND;
        # a resume compares it); none given: a resume goes on from the losses its
        # checkpoint holds
        **({"fail": tuple(f"{f.node}@{f.round}" for f in failures)} if failures else {}),
        **({"k_select": spec.k_select} if search else {})})
    cross_checks(values, API)  # (the rules tying settings together: the command line's too)
    if comm is None:  # (the simulator; under MPI a spare is a rank of the job)
        from .preflight import check_spares_fit

        check_spares_fit(spares, API)
    # the step the command line takes too: a refusal is this process's, which train makes
    # one UsageError on every process in the collective of the locks
    leg = Leg(spec.algorithm, None if search else spec.tokens, ck_dir)
    try:
        return values, check_disk([leg], places, nodes=spec.nodes, rounds=spec.rounds,
                                  record=record(values, rule, identity), naming=API,
                                  latency=values["latency"]), None, identity
    except UsageError as exc:  # (not run: train refuses)
        plan = CheckpointPlan(ck_dir, places.every, places.keep)
        return values, Prepared(((spec.algorithm, plan),)), str(exc), identity


def _checked(run: dict, rule, comm, out, records: Records, checkpoints: Checkpoints,
             latency: Latency) -> tuple[Values, Places, Path | None]:
    """The run's settings with every value checked by the rules the command line uses
    (spelt as the flat keywords, also for ``Records(log_every=...)``), or
    UsageError (one line). Returns also where the run writes and its checkpoint
    directory (given; beside the checkpoint it resumes when that run kept them apart;
    else ``out/checkpoints``)."""
    if comm is not None:  # (before any MPI call could hang on it)
        collective.check_communicator(comm)
    else:
        collective.warn_if_in_mpi_job()  # every process of an mpirun job simulating alone?
    values: Any = check_values({
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
    search = algorithm == "search"
    if search:  # (Algorithm 2 as the settings table spells it, the command line's k auto)
        algorithm, k = "teleportation", "auto"
    values = Values({**values, **{name: run[name] for name in ("nesterov", "k_select", "epochs")
                                  if name in run},
                     "algorithm": algorithm, "k": k,
                     **({"optimizer": rule} if rule is not None else {})}, API)

    def where(name):
        return None if values[name] is None else Path(absolute(name, values[name], API))

    out, ck_dir = where("out"), where("checkpoint_dir")
    if values["resume"] == "auto":  # (continue, return a finished run, or start: find.auto_resume)
        leg = "search" if search else algorithm
        resume = auto_resume(out, ck_dir or (out and out / "checkpoints"), leg)
        found = None if resume is None else locate(resume, leg)
        if found is not None and resume is not None:  # (the same run only: another length
            # continues when asked)
            resume_rules.check_auto_length(out or resume, found[1], API, rounds=values["rounds"])
    else:
        resume = where("resume")
    if ck_dir is None and resume is not None and not search:
        ck_dir = _continued_dir(resume, algorithm)
    if ck_dir is None and out is not None:
        ck_dir = out / "checkpoints"
    given = where("checkpoint_dir")
    places = Places(out, given, resume, *checkpoint_policy(values))
    return values, places, ck_dir


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
