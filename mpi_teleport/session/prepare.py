"""The one preparation of a run, for both front ends: what its settings ask of the disk,
checked before anything runs (:func:`check_disk`), and the run's
:class:`RunSettings` made of its settings and its problem (:func:`prepare`).

Both front ends first make :class:`~mpi_teleport.session.settings.Values` of their input
(the command lines: :func:`mpi_teleport.front.cli.from_args`; the Python API:
:func:`mpi_teleport.session.api_checks.checked`). Then the disk: the command line once for
the whole job (:func:`check_job`: both runs of ``compare``),
the API once per call; both describe the runs they will start as :class:`Leg` rows and
where they write as :class:`Places`, and call :func:`check_disk` (all three in
:mod:`mpi_teleport.session.disk_check`): a latency matrix file readable,
the outputs writable, the checkpoint resumed found, matching this run's settings
(``record``, what a checkpoint's manifest keeps) and intact, every checkpoint directory
free of another run's checkpoints. It returns the :class:`Prepared` result: each run's
:class:`~mpi_teleport.checkpoint.CheckpointPlan` (made once, the resumed checkpoint
found) and the directories the job locks, which
:func:`mpi_teleport.session.runner.hold_agreed` (the one lock function) takes. A refusal is
one :class:`~mpi_teleport.errors.UsageError`, spelt as the front end spells the setting
(a :class:`~mpi_teleport.errors.Naming`: ``--resume DIR`` or ``resume='DIR'``); under MPI
every process prepares, and the ranks agree on the first refusal before anything runs.
Last, with the problem built, each run is :func:`prepare` ``(problem, values, comm,
prepared=...)``: the one function from settings to the RunSettings that
:func:`mpi_teleport.train` takes, the same for both front ends.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, cast

from ..checkpoint import CheckpointPlan
from ..core.spec import Logging, RunSpec
from ..errors import CLI, Naming, UsageError
from ..latency.model import LatencySettings
from ..problem import with_defaults
from ..runtime.progress import shows
from ..problems import describe, factory, is_factory, problem_settings
from . import resume as resume_rules
from .build import _value, active_nodes, group, record, spec_of
from .disk_check import Leg, Places, Prepared, check_disk
from .loop_options import epoch_rounds, step_rule
from .job import leg_dir, out_dir, runs_requested
from .script import OBJECTS, raw_of_namespace, script_rows
from .settings import (PROBLEM_ROWS, Values, agree_interval, checkpoint_policy, coerce,
                       default_logging, defaults, one_shape, rows, setting)


@dataclass(frozen=True)
class RunSettings:
    """Every setting of one run, validated, in one frozen object, for :func:`mpi_teleport.train`.

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> settings = mt.RunSettings.from_args(["--nodes", "8", "--k", "2", "--rounds", "20",
    ...     "--algorithm", "teleportation"], problem=Quadratic(n=8, d=3))
    >>> settings.spec.k, settings.spec.rounds
    (2, 20)

    Build one with :meth:`from_args` (a script's command line), :meth:`from_namespace`
    (its own ``argparse`` namespace) or :meth:`from_keywords` (a training function's
    keywords, as :func:`mpi_teleport.teleportation` and the others build it); read its
    fields, do not
    construct them: their types (``RunSpec``, ``Logging``, ``LatencySettings``,
    ``CheckpointPlan``) are internal and may change. It holds
    values only; what a run holds while it runs (a signal handler, hot spares, a progress
    bar, the survivors' meeting) is the caller's
    :class:`~mpi_teleport.session.runner.RunContext`.

    Made alike by :func:`prepare` from the Python API (:func:`mpi_teleport.teleportation`, :func:`~mpi_teleport.dsgd`,
    :func:`~mpi_teleport.search_k`: the keywords, checked by the one validator spelt as
    keywords) and from the command lines (``python -m mpi_teleport.sim`` and ``.run``:
    flags and TOML, checked by the same validator spelt as flags; a script's own flags:
    :meth:`from_args`); the rules live in the
    settings table (:mod:`mpi_teleport.session.settings`), so two front ends cannot drift,
    and :func:`train` checks what it is handed by them. ``spec``: what runs (algorithm,
    n, k, rounds, step size, optimizer, topology, seed); ``logging``: when it is recorded
    and evaluated; ``latency``: the latency layer; ``plan``: its checkpoints; ``out``:
    where config.json, metrics.jsonl and summary.json go; ``manifest``: the settings a
    checkpoint keeps and a resume compares; ``record``: config.json; ``hold``:
    (directory, name) pairs the root locks for the run; ``callback``: called with each
    record; ``progress``: a progress bar on the root's stderr. ``elastic``,
    ``failures``, ``spares``, ``agree_every``: elastic mode (mpi_teleport/DESIGN.md
    §11)."""

    spec: RunSpec
    logging: Logging = default_logging()  # (the table's defaults)
    latency: LatencySettings = LatencySettings()
    plan: CheckpointPlan | None = None
    out: Path | None = None
    manifest: dict | None = None
    record: dict | None = None
    summary_extra: dict | None = None
    problem_name: str | None = None
    resume_from: Path | str | None = None
    # (what the root locks: the directories of plan and out, each named as its front end
    # spells it for a refusal; spelling, so not compared)
    hold: tuple = field(default=(), compare=False)
    callback: Callable | None = None
    progress: bool = False
    elastic: bool = False
    failures: tuple = ()
    spares: int = 0
    agree_every: int | None = None  # (None: 0, chosen by the run, in elastic mode; else 1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "agree_every",
                           agree_interval(self.agree_every, self.elastic or bool(self.failures)))
        # deeply frozen: what config.json and a checkpoint keep can be read, not changed
        for name in ("manifest", "record", "summary_extra"):
            object.__setattr__(self, name, frozen(getattr(self, name)))

    @classmethod
    def from_args(cls, argv=None, toml=None, *, problem: Any, comm: Any = None,
                  known_only: bool = False, **overrides: Any) -> Any:
        """The command lines' flags ``argv`` (default ``sys.argv[1:]``) over the TOML file
        ``toml`` (or ``--config FILE.toml``) over the table's defaults, as the
        RunSettings of one run of ``problem``, the script's own object, for
        :func:`mpi_teleport.train` ``(problem, settings, comm)``: what ``python -m
        mpi_teleport.sim`` and ``.run`` make of the same flags. ``--algorithm`` names one
        run (teleportation, or dsgd; ``compare`` is two: refused), ``--k auto`` Algorithm
        2; ``--epochs`` counts the problem's epochs, ``--batch-size`` must be the
        problem's own. ``comm``: the communicator the run will use (None: the simulator;
        ``"auto"``: MPI under a launcher, else the simulator; under MPI ``--nodes``
        defaults to its size and every process learns the first refusal, in one
        collective on a duplicate of it). ``known_only``: return ``(settings, rest)``,
        ``rest`` the arguments that are not the package's (else they are refused).
        ``overrides``: settings by keyword over the flags, and the Python objects the
        flags cannot name (``optimizer=``, ``lr=`` a scheduler, ``callback=``,
        ``topology=`` a function), as :meth:`from_namespace` takes them. The flags that
        build a problem (``--problem``, ``--sigma2``, ...) are refused: config.json names
        the problem by its class and fingerprint, as the API does, and ``--resume`` (or
        ``--resume auto``) compares them with the checkpoint's, as the API's ``resume=``
        does, whether the checkpoint was written here or through the API. UsageError
        (one line, spelt as flags) for bad input.

        >>> import mpi_teleport as mt
        >>> from mpi_teleport.problems.quadratic import Quadratic
        >>> settings = mt.RunSettings.from_args(
        ...     ["--nodes", "8", "--k", "2", "--algorithm", "teleportation", "--rounds", "20",
        ...      "--lr", "0.05", "--progress", "off"], problem=Quadratic(n=8, d=3))
        >>> mt.train(Quadratic(n=8, d=3), settings).summary["k"]
        2
        """
        return settings_from_args(argv, toml, problem=problem, comm=comm,
                                  known_only=known_only, **overrides)

    @classmethod
    def from_namespace(cls, args: Any, *, problem: Any, comm: Any = None,
                       **overrides: Any) -> "RunSettings":
        """The RunSettings of one run of ``problem`` from ``args``, the namespace a
        script's own ``argparse`` parser returned after :func:`mpi_teleport.add_arguments`
        added the package's flags to it: the package's flags given, the script's own
        flags of the same names (``--lr``, ``--epochs``, ``--batch-size``, ``--seed``,
        ...) for those settings, and ``overrides`` by keyword over both: a setting's
        value (``rounds=1``; None drops what the flags gave) or a Python object
        (``optimizer=`` a torch optimizer class, factory or instance; ``lr=`` a torch
        scheduler, built or unbuilt, or a function of the round; ``callback=``;
        ``topology=`` a function). The script's other flags are left alone. Otherwise as
        :meth:`from_args` (``comm`` None, a communicator or ``"auto"``).

        >>> import argparse, mpi_teleport as mt
        >>> from mpi_teleport.problems.quadratic import Quadratic
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--lr", type=float, default=0.05)
        >>> _ = mt.add_arguments(parser)
        >>> args = parser.parse_args(["--nodes", "8", "--k", "2", "--rounds", "20",
        ...                           "--algorithm", "teleportation"])
        >>> settings = mt.RunSettings.from_namespace(args, problem=Quadratic(n=8, d=3))
        >>> settings.spec.lr, settings.spec.tokens
        (0.05, 2)
        """
        return settings_from_namespace(args, problem=problem, comm=comm, **overrides)

    @classmethod
    def from_keywords(cls, problem: Any, *, algorithm: str = "teleportation",
                      **keywords: Any) -> "RunSettings":
        """The RunSettings a training function makes of its keywords, without running:
        ``mt.train(problem, RunSettings.from_keywords(problem, algorithm="dsgd", **kw),
        comm)`` runs as ``mt.dsgd(problem, **kw)`` does, record for record.
        ``algorithm``: the function whose keywords these are, ``"teleportation"``
        (default), ``"dsgd"`` or ``"search_k"``; ``keywords``: that function's, checked
        as it checks them (``comm`` among them: pass the same to :func:`mpi_teleport.train`).
        The inputs on disk are checked as the call checks them (a checkpoint to resume,
        the output directory); under MPI every process learns the first refusal, in one
        collective on a duplicate of ``comm``. UsageError (one line, spelt as keywords)
        for bad input, TypeError for a keyword the function does not take.

        >>> import mpi_teleport as mt
        >>> from mpi_teleport.problems.quadratic import Quadratic
        >>> settings = mt.RunSettings.from_keywords(Quadratic(n=8, d=3), nodes=8, k=2,
        ...                                         rounds=20, lr=0.05)
        >>> settings.spec.tokens, settings.spec.rounds
        (2, 20)
        >>> mt.train(Quadratic(n=8, d=3), settings).summary["k"]
        2
        """
        from .keywords import FUNCTIONS

        if algorithm not in FUNCTIONS:
            raise UsageError(f"algorithm={algorithm!r}: expected 'teleportation', 'dsgd' or "
                             f"'search_k' (the training function whose keywords these are)")
        return agreed_settings_from_keywords(algorithm, problem, keywords)[0]


class FrozenDict(dict):
    """A dict that cannot change (a RunSettings' records): still a dict to json, to
    ``==`` and to ``{**d}``, rebuilt whole by pickle and copy."""

    def _frozen(self, *args, **kwargs):
        raise TypeError("RunSettings are frozen: make a changed copy with "
                        "dataclasses.replace(settings, record={**settings.record, ...})")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _frozen
    __ior__ = _frozen

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


class FrozenList(list):
    """A list that cannot change, as :class:`FrozenDict` (equal to the list it holds)."""

    __setitem__ = __delitem__ = __iadd__ = __imul__ = FrozenDict._frozen
    append = extend = insert = pop = remove = clear = sort = reverse = FrozenDict._frozen

    def __reduce__(self):
        return (FrozenList, (list(self),))


def frozen(value: Any) -> Any:
    """``value`` with every dict in it a :class:`FrozenDict` and every list a
    :class:`FrozenList` (a tuple's items likewise)."""
    if isinstance(value, dict):
        return FrozenDict({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(frozen(item) for item in value)
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(frozen(item) for item in value)
    return value


def _legs(cfg) -> list[Leg]:
    """The runs a job asks for (both of ``compare``), as :func:`check_disk` takes
    them: Algorithm 2 (``--k auto``) takes no checkpoints."""
    return [Leg(algorithm, None if k == "auto" else cfg.nodes if algorithm == "dsgd" else int(k),
                None if k == "auto" else leg_dir(cfg, algorithm))
            for algorithm, k in runs_requested(cfg)]


def _places(cfg) -> Places:
    """Where a job writes and what it resumes."""
    def where(value):
        return None if value is None else Path(value)

    return Places(where(cfg.out), where(cfg.checkpoint_dir), where(cfg.resume),
                  *checkpoint_policy(cfg), compare=cfg.algorithm == "compare")


def check_job(cfg: Values) -> Prepared:
    """The command line's disk check of a job (every run of it, once), the API's step
    (:func:`check_disk`): a latency matrix file, writable outputs,
    the checkpoint resumed against this run (``--resume``), the checkpoint directories;
    the runs' checkpoint plans and the directories the job locks. UsageError otherwise."""
    # (--epochs: the rounds depend on the problem's data; prepare checks them)
    rounds = cfg.rounds if cfg.epochs is None else None
    return check_disk(_legs(cfg), _places(cfg), nodes=cfg.nodes, rounds=rounds,
                      record=record(cfg, step_rule(cfg)[2]), naming=CLI,
                      latency=cfg.latency)


# ----------------------------------------------------------------------------- the run
def prepare(problem: Any, values: Values, comm: Any = None, *, prepared: Prepared,
            job: Values | None = None, callback=None,
            identity: Mapping[str, Any] | None = None):
    """The :class:`RunSettings` of one run, the one way both front ends make it: ``values`` (one run's: ``algorithm`` teleportation or dsgd, ``k``
    an int or 'auto' for Algorithm 2, or the API's 'search') applied to ``problem`` (its
    epochs into rounds, its threads, the optimizer's weight decay on its parameters, the
    authors' schedule's rounds per epoch), its spec
    (:func:`mpi_teleport.session.build.run_spec`), its checkpoint plan from the disk's
    ``prepared`` (:func:`check_disk`), and what config.json and a checkpoint's manifest
    keep (:func:`mpi_teleport.session.build.record`), made by :func:`build`. ``comm``: the
    run's communicator or
    transport (None: the simulator). ``job``: the command line's values of the whole job
    (both runs of ``compare`` keep them in their checkpoints; it then holds the locks
    itself); None: the run is the job and :func:`mpi_teleport.train` locks what it
    holds. ``callback``: the API's, called with each record. ``identity``: the problem
    object's, where the caller has it already (the API's disk check compared it:
    :func:`~mpi_teleport.session.api_checks.checked`); None: described here.

    The values are brought to one shape first (:func:`~.settings.one_shape`), so the same
    run of either front end prepares alike. What a command line's job adds is said by
    ``job``, never read from the values' shape: its problem is named by its rows
    (recorded by name, back end and a factory's arguments); without a job, the problem
    object is recorded by its class and fingerprint
    (:func:`~mpi_teleport.session.resume.describe_problem`) and its own facts. UsageError
    (one line) for a problem built for other nodes, or epochs the problem cannot count."""
    values = one_shape(values)  # (both front ends' values alike from here on)
    naming = values.naming
    problem = with_defaults(problem)  # (TypeError naming what is missing)
    given = problem.nodes
    if isinstance(given, int) and not isinstance(given, bool) and given != values.nodes:
        raise UsageError(f"the problem was built for nodes={given} but the run has "
                         f"nodes={values.nodes}: give both the same number")
    # A command line's job names its problem (the problem rows: recorded by name, back end
    # and a factory's arguments); a training function or a script hands its own object,
    # recorded by class and fingerprint; the run is then the job: its checkpoints keep its
    # own values and it holds its own locks.
    named = job is not None
    job = values if job is None else job
    used = (factory.record(values.problem, problem_settings(job.to_dict(), defaults()),
                           comm is not None) if named and is_factory(values.problem) else None)
    values = with_epochs(values, problem)  # (a factory's problem: its batch size)
    with_threads(problem, values.threads)
    spec = spec_of(values, problem)
    phases = {}
    if values.get("k") == "auto":  # how many rounds each phase runs, and why
        phases = phase_rounds(values, job.rounds, getattr(problem, "n_train", None))
    plan = prepared.plan(values.algorithm)
    if values.epochs is not None and plan is not None and plan.manifest is not None:
        resume_rules.check_rounds(naming.given("resume", job.resume), plan.manifest, spec.rounds,
                     f"{naming.given('epochs', f'{values.epochs:g}')} ({spec.rounds} rounds)")
    record_values = values.to_dict()
    if named:
        facts = {"backend": "sim" if comm is None else "mpi", **phases, **describe(problem)}
        identity = None
    else:
        facts = {**describe(problem), **_config_facts(problem)}
        if identity is None:
            touches = (values.get("checkpoint_dir") is not None
                       or values.get("resume") is not None)
            identity = resume_rules.describe_problem(problem, spec.seed, touches)
    if used is not None:  # what the factory received; flags it did not take left out
        unused = set(used["unused"]) - ({"batch_size"} if values.epochs is not None else set())
        record_values = {k: v for k, v in record_values.items() if k not in unused}
        facts = {k: v for k, v in facts.items() if k not in unused}
        facts["factory_args"] = used["factory_args"]
    return build(record_values, spec, naming=naming, plan=plan,
                 epoch_span=epoch_span(values, problem),
                 out=out_dir(job, values.algorithm), identity=identity, facts=facts,
                 manifest_values=job.to_dict() if named else None,
                 hold=() if named else prepared.hold, callback=callback,
                 summary_extra=phases if named else None,
                 problem_name=values.problem if named else None,
                 resume_from=job.out if named else None)



_AT_EPOCH_ENDS = ("logging.log_every_epochs", "logging.eval_every_epochs")  # (the rows counting
# epochs; each named as its rounds' row with _epochs)


def epoch_span(values: Values, problem) -> tuple[int, int] | None:
    """(n_train, samples the active nodes draw a round) of a problem that knows its
    epochs (a TorchProblem), which says where its epochs end; None for another problem,
    where a record counted in epochs is refused in one line."""
    n_train, batch = getattr(problem, "n_train", None), getattr(problem, "batch_size", None)
    if n_train and batch and values.get("k") != "auto":
        return int(n_train), int(batch) * active_nodes(values)
    given = [row.name for row in rows() if row.where in _AT_EPOCH_ENDS
             and values.get(row.name) is not None]
    if given:
        name = values.naming.name
        why = ("Algorithm 2's phases count their own rounds"
               if values.get("k") == "auto" else
               f"{type(getattr(problem, 'problem', problem)).__name__} does not know its "
               f"epochs (n_train, batch_size)")
        raise UsageError(f"{name(given[0])}: {why}; use {name(given[0][:-len('_epochs')])}")
    return None


def _config_facts(problem) -> dict:
    """config.json's facts of the model a problem has to tell (a TorchProblem's class
    name and batch size: ``config_facts()``); not compared by a resume."""
    facts = getattr(getattr(problem, "problem", problem), "config_facts", None)
    return dict(facts()) if callable(facts) else {}


def with_epochs(values: Values, problem) -> Values:
    """``epochs`` E (the command line's --epochs): the same number of training samples
    for every method, so a run with k active nodes (n for DSGD and for each phase of
    Algorithm 2) gets ceil(E * n_train / (batch_size * k)) rounds."""
    if values.epochs is None:
        return values
    name = values.naming.name
    called = values.get("problem") or type(getattr(problem, "problem", problem)).__name__
    if getattr(problem, "n_train", None) is None:
        raise UsageError(f"{name('epochs')} needs a problem that knows its training-set size "
                         f"(n_train); {called} does not: use {name('rounds')}")
    batch = getattr(problem, "batch_size", None)  # (a factory's own batch size)
    if batch is None and is_factory(called):
        raise UsageError(f"{name('epochs')} needs a problem that knows its batch size "
                         f"(batch_size); {called} does not: use {name('rounds')}")
    batch = int(batch or values.batch_size)
    return values.replace(batch_size=batch, rounds=epoch_rounds(
        values.epochs, problem.n_train, batch, active_nodes(values)))


def with_threads(problem, threads) -> None:
    """``threads`` N|auto (the command line's --threads): the torch intra-op threads a
    TorchProblem computes with (its own default, 1, when not given); refused for a
    problem that computes without torch."""
    if threads is None:
        return
    inner = getattr(problem, "problem", problem)
    if getattr(inner, "torch_settings", None) is None:
        raise UsageError(f"--threads {threads}: the problem ({type(inner).__name__}) computes "
                         f"without torch; drop --threads")
    from ..problems.torch_options import TorchSettings

    inner.torch_settings = TorchSettings(threads)


def phase_rounds(values: Values, rounds_given: int, n_train) -> dict:
    """How many rounds each phase of ``--k auto`` runs and why (config.json, summary.json);
    ``values`` after ``epochs`` was applied, ``rounds_given`` its ``rounds``."""
    out = {"rounds_per_phase": values.rounds, "phases": 2, "rounds_total": 2 * values.rounds}
    if values.epochs is None:
        out["rounds_per_phase_from"] = f"--rounds {rounds_given}"
        return out
    out["rounds_per_phase_from"] = (
        f"--epochs: ceil(epochs * n_train / (batch_size * n)) = ceil({values.epochs:g} * "
        f"{n_train} / ({values.batch_size} * {values.nodes})) = {values.rounds}; phase 1 "
        f"(k = n) processes {values.epochs:g} epoch(s) in these rounds, phase 2 runs as many "
        f"rounds, in which candidate k processes k/n of that")
    return out


def build(values: Mapping[str, Any], spec: RunSpec, *, naming: Naming, plan, out,
          identity: Mapping[str, Any] | None = None, facts: Mapping[str, Any] | None = None,
          manifest_values: Mapping[str, Any] | None = None, hold: tuple = (),
          callback=None, summary_extra: dict | None = None, problem_name: str | None = None,
          resume_from=None, epoch_span: tuple[int, int] | None = None) -> RunSettings:
    """The :class:`RunSettings` of one run, from its checked ``values`` and ``spec``, the
    same way for both front ends: its logging and latency layer (the fields the table
    places there, :func:`group`), elastic mode and failure
    plan (``fail`` parsed for ``spec.nodes`` and the spares), the manifest a checkpoint
    keeps (:func:`record` of ``manifest_values``, default ``values``: the command line's
    ``compare`` keeps the job's settings in both runs' checkpoints) and config.json
    (:func:`record` of ``values`` and the run's ``facts``: the back end, the problem's
    own description). ``naming``: how the run's messages spell a setting; ``plan``,
    ``hold``: what :func:`~mpi_teleport.session.disk_check.check_disk` found; ``out``: where the
    run's files go; ``epoch_span``: (n_train, samples a round) of a problem that knows
    its epochs (where records at epoch ends fall). Values only: what the caller holds while the run runs is its
    :class:`~mpi_teleport.session.runner.RunContext`. The one constructor of a
    RunSettings in the package; :func:`prepare` calls it."""
    from ..elastic.survivors import parse_failures

    spares = _value(values, "spares")
    failures = parse_failures(_value(values, "fail"), spec.nodes, spares)
    recorded = record(values, spec.optimizer, identity)
    manifest = (recorded if manifest_values is None
                else record(manifest_values, spec.optimizer, identity))
    return RunSettings(spec, Logging(naming=naming, **group(values, "logging"),
                                     epoch_span=epoch_span),
                       LatencySettings(**group(values, "latency")), plan=plan,
                       out=out, manifest=manifest, record={**recorded, **(facts or {})},
                       summary_extra=summary_extra, problem_name=problem_name,
                       resume_from=resume_from, hold=tuple(hold), callback=callback,
                       progress=shows(_value(values, "progress")),
                       elastic=bool(_value(values, "elastic")) or bool(failures),
                       failures=failures, spares=spares,
                       agree_every=_value(values, "agree_every"))


# The Python API's keywords (mt.teleportation, mt.dsgd, mt.search_k and
# RunSettings.from_keywords): session/keywords.py's table, checked by session/api_checks.py,
# then the one preparation above.

def settings_from_keywords(function: str, problem: Any, keywords: dict[str, Any]):
    """The RunSettings of one call of the training function ``function`` (teleportation,
    dsgd or search_k) with ``keywords``, the communicator it runs on (``comm``, "auto"
    resolved) and this process's refusal to run (its one-line reason: the inputs on disk
    refused; :func:`mpi_teleport.train` agrees it on every process in the collective of
    the locks). The order of the steps is the order of the messages for bad input."""
    from ..core.schedulers import step_size
    from ..runtime.launched import resolve_comm
    from .api_checks import checked
    from .keywords import filled
    from .loop_options import eval_rounds, optimizer_settings, rounds_for, within_phase
    from .settings import FLAT, Checkpoints, Latency, Records, merge, merge_latency

    kw = filled(function, keywords)

    def flat(group: type) -> dict[str, Any]:  # (the flat keywords of an option object)
        return {name: kw[name] for name in FLAT[group].values() if name in kw}

    comm = resolve_comm(kw["comm"])  # ("auto": MPI under a launcher, else the simulator)
    nodes = kw["nodes"]
    active = kw["k"] if function == "teleportation" else nodes
    rounds = rounds_for(problem, kw["rounds"], kw["epochs"], active)
    options: dict[str, Any] = {}
    if function == "search_k":
        from ..runtime.search import check_select

        lr = step_size(kw["lr"], kw["lr_step"], problem, nodes)
        run = {"algorithm": "search", "nodes": nodes, "k": None, "rounds": rounds,
               "epochs": kw["epochs"],
               "lr": within_phase(lr, rounds), "momentum": kw["momentum"],
               "nesterov": kw["nesterov"], "topology": kw["topology"],
               "variant": kw["variant"], "seed": kw["seed"],
               "k_select": check_select(kw["select"])}
        records = merge(Records, kw["records"], **flat(Records))
        checkpoints = Checkpoints()
    else:
        lr, momentum, nesterov, rule = optimizer_settings(
            kw["optimizer"], problem, kw["lr"], kw["momentum"], kw["nesterov"])
        lr = step_size(lr, kw["lr_step"], problem, active, kw["optimizer"])
        run = {"algorithm": function, "nodes": nodes, "k": active, "rounds": rounds,
               "epochs": kw["epochs"],
               "lr": lr, "momentum": momentum, "nesterov": nesterov,
               "topology": kw["topology"], "variant": kw.get("variant", "overlap"),
               "seed": kw["seed"]}
        eval_every, in_epochs = eval_rounds(problem, kw["eval_every"],
                                            kw["eval_every_epochs"], active)
        records = merge(Records, kw["records"], **{**flat(Records), "eval_every": eval_every,
                                                   "eval_every_epochs": in_epochs})
        checkpoints = merge(Checkpoints, kw["checkpoints"], **flat(Checkpoints))
        options = {"rule": rule, "elastic": kw["elastic"], "fail": kw["fail"],
                   "spares": kw["spares"]}
    latency = merge_latency(**flat(Latency))
    values, prepared, refused, identity = checked(
        problem, run, comm=comm, out=kw["out"], records=records, checkpoints=checkpoints,
        latency=latency, **options)
    settings = prepare(problem, values, comm, prepared=prepared, callback=records.callback,
                       identity=identity)
    return settings, comm, refused


def agreed_settings_from_keywords(function: str, problem: Any, keywords: dict[str, Any]):
    """:func:`settings_from_keywords` with its refusal learnt by every process: a value
    the keywords' checks refuse and the disk's refusal alike. Under MPI (``comm``) every
    process takes part in one collective on a duplicate of it, refused or not, so a
    refusal is an agreed UsageError on all of them (a launched script then ends with one
    line and status 2, without MPI's abort) and none is left waiting. Returns the
    settings and the communicator."""
    from ..runtime.collective import agreed
    from ..runtime.launched import resolve_comm

    try:
        settings, comm, refused = settings_from_keywords(function, problem, keywords)
    except UsageError as exc:
        try:
            comm = resolve_comm(keywords.get("comm"))
        except UsageError:
            raise exc from None
        if comm is None:
            raise
        settings, refused = None, str(exc)
    if comm is None:
        if refused:
            raise UsageError(refused)
        return settings, comm
    refused = _agreed_refusal(comm, refused)  # (every process stops together, or none does)
    if refused:
        raise agreed(UsageError(refused))
    return settings, comm


def _agreed_refusal(comm: Any, refused: str | None) -> str | None:
    """The first process's refusal, learnt by every process of ``comm`` (one collective
    on a duplicate of it)."""
    from ..runtime.collective import check_communicator, first_error
    from ..runtime.transport import Transport

    check_communicator(comm)
    transport = Transport.duplicate(comm)
    try:
        return first_error(transport.allgather(refused))
    finally:
        transport.free()


# A script's own command line (RunSettings.from_args / from_namespace): its flags, read
# by session/script.py's parser side, checked as the command lines check them, for the
# script's own problem, then the one preparation above.

def settings_from_args(argv, toml=None, *, problem: Any, comm: Any = None,
                       known_only: bool = False, **overrides: Any):
    """``RunSettings.from_args``: the flags ``argv`` (default ``sys.argv[1:]``; with
    ``known_only`` the others are returned beside the settings) through
    :func:`script_settings`."""
    from .flags import build_parser, raw_of, with_config

    parser = build_parser("mpi_teleport", "")
    refused: str | None = None
    try:
        raw, rest = raw_of(parser, with_config(argv, toml), known_only)
    except UsageError as exc:  # (every process refuses alike: the same flags)
        raw, rest, refused = {}, [], str(exc)
    settings = script_settings(raw, problem=problem, comm=comm, refused=refused, **overrides)
    return (settings, rest) if known_only else settings


def settings_from_namespace(args: Any, *, problem: Any, comm: Any = None,
                            **overrides: Any):
    """``RunSettings.from_namespace``: the namespace of a parser given
    :func:`~mpi_teleport.session.script.add_arguments`, through :func:`script_settings`."""
    refused: str | None = None
    try:
        raw = raw_of_namespace(args)
    except UsageError as exc:
        raw, refused = {}, str(exc)
    return script_settings(raw, problem=problem, comm=comm, refused=refused, **overrides)


def script_settings(raw: dict, *, problem: Any, comm: Any = None, refused: str | None = None,
                **overrides: Any):
    """The :class:`RunSettings` of one run of ``problem`` (the
    script's own object) from the raw settings of its command line (given flags,
    coerced) and ``overrides`` by keyword: a setting's value (``rounds=1``; None drops
    what the flags gave) or a Python object (``optimizer=`` a torch optimizer class,
    factory or instance; ``lr=`` a number, a function of the round or a torch scheduler,
    built or to build on the optimizer; ``callback=``; ``topology=`` a function).
    ``comm``: None (the simulator), a communicator, or ``"auto"``; under MPI every
    process learns the first refusal (one collective on a duplicate of ``comm``).
    UsageError (one line, spelt as flags) for bad input."""
    from ..runtime.launched import resolve_comm

    comm = resolve_comm(comm)
    error, settings = refused, None
    if error is None:
        try:
            settings = _settings(dict(raw), problem, comm, overrides)
        except UsageError as exc:
            error = str(exc)
    if comm is not None:  # (every process stops together, or none does)
        error = _agreed_refusal(comm, error)
    if error:
        raise UsageError(error)
    return settings


def _settings(raw: dict, problem: Any, comm: Any, overrides: dict):
    from ..core.schedulers import is_scheduler, is_scheduler_factory
    from ..problem import with_defaults
    from . import preflight
    from . import resume as resume_rules
    from .build import active_nodes, record, spec_of

    objects = {name: overrides.pop(name) for name in OBJECTS if name in overrides
               and not _is_setting(name, overrides[name])}
    for name, value in overrides.items():
        found = setting(name) if name in {row.name for row in script_rows()} else None
        if found is None:
            raise UsageError(f"{name}=: not a setting a script's run takes (the flags that "
                             f"build a problem are the command lines')")
        if value is None:
            raw.pop(name, None)
        else:
            raw[name] = coerce(found, value, "command line") if isinstance(value, str) else value
    building = [name for name in PROBLEM_ROWS if name in raw]
    if building:
        flags = ", ".join(setting(name).flag for name in building)
        raise UsageError(f"{flags}: RunSettings.from_args runs the problem you pass "
                         f"(problem=); the flags that build one are the command lines': "
                         f"drop them")
    world = None if comm is None else comm.Get_size()
    values = preflight.load(raw, world, script=True)
    if values.algorithm == "compare":
        raise UsageError("--algorithm compare runs two methods; RunSettings.from_args "
                         "makes one run: give --algorithm teleportation or dsgd")
    problem = with_defaults(problem)
    _check_batch_size(raw, values, problem)
    (algorithm, k), = runs_requested(values)
    run = Values({name: value for name, value in values.replace(
        algorithm=algorithm, k=values.nodes if algorithm == "dsgd" else k).items()
        if name not in PROBLEM_ROWS}, CLI)
    run = _with_objects(run, objects, problem, raw, is_scheduler, is_scheduler_factory,
                        active_nodes)
    counted = with_epochs(run, problem)  # (the rounds and batch size the run records)
    spec = spec_of(counted, problem)
    touches = values.checkpoint_dir is not None or values.out is not None \
        or values.resume is not None
    identity = resume_rules.describe_problem(problem, spec.seed, touches)
    prepared = check_disk(_legs(values), _places(values), nodes=values.nodes,
                          rounds=spec.rounds, record=record(counted, spec.optimizer, identity),
                          naming=Naming(True, frozenset(raw) | frozenset(objects)),
                          latency=values.latency)
    return prepare(problem, run, comm, prepared=prepared, identity=identity,
                   callback=objects.get("callback"))


def _is_setting(name: str, value: Any) -> bool:
    """Whether a keyword among the objects' names is a setting's plain value instead
    (``optimizer="adam"``, ``lr=0.1``, ``topology="ring"``)."""
    if name == "callback" or value is None:
        return False
    if name == "lr":
        return not callable(value) and not hasattr(value, "step")
    return isinstance(value, str)


def _with_objects(run: Values, objects: dict, problem, raw: dict, is_scheduler,
                  is_scheduler_factory, active_nodes) -> Values:
    """The run's values with the script's Python objects in them: ``optimizer=`` read as
    the API reads it (its rule held as the optimizer row), ``lr=`` a scheduler replayed
    as the step size, ``topology=`` a function."""
    from ..core.schedulers import step_size
    from .loop_options import optimizer_factory, optimizer_settings

    changes: dict[str, Any] = {}
    optimizer = objects.get("optimizer")
    if optimizer is not None:
        if run.optimizer != "sgd" or run.optimizer_args is not None:
            raise UsageError(f"--optimizer {run.optimizer} and optimizer= both name the "
                             f"optimizer: give one")
        lr, momentum, nesterov, rule = optimizer_settings(
            optimizer, problem, run.lr if "lr" in raw else None, run.momentum, run.nesterov)
        changes.update(optimizer=rule, momentum=momentum, nesterov=nesterov, lr=lr)
    lr = objects.get("lr")
    if lr is not None:
        if run.lr_scheduler is not None:
            raise UsageError(f"--lr-scheduler {run.lr_scheduler} and lr= both set the step "
                             f"size: give one")
        if is_scheduler_factory(lr) and optimizer is None:
            optimizer = optimizer_factory({**run, **changes}, plain_sgd=True)
        lr = step_size(lr, run.lr_scheduler_interval, problem, active_nodes(run), optimizer)
        changes["lr"] = lr
    if "topology" in objects:
        changes["topology"] = objects["topology"]
    return run.replace(**changes)


def _check_batch_size(raw: dict, values: Values, problem) -> None:
    """``--batch-size`` given: the problem's own batch size, or refused in one line (a
    problem draws its batches as it was built)."""
    if "batch_size" not in raw:
        return
    inner = getattr(problem, "problem", problem)
    own = getattr(problem, "batch_size", None)
    given = values.batch_size
    if own is None:
        raise UsageError(f"--batch-size {given}: {type(inner).__name__} draws no batches of "
                         f"a set size; drop --batch-size")
    if int(own) != int(given):
        raise UsageError(f"--batch-size {given}: the problem draws batches of {own} (it was "
                         f"built with batch_size={own}); build it with batch_size={given} or "
                         f"drop --batch-size")
