"""The disk a run's settings name, checked before anything runs, by either front end:
a latency matrix file readable, the outputs writable, the checkpoint resumed found,
matching the run's settings and intact, every checkpoint directory free of another run's
(:func:`check_disk`). The runs a job starts are :class:`Leg` rows, where it writes
:class:`Places`; the result, :class:`Prepared`, holds each run's checkpoint plan and the
directories the job locks. Internal."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checkpoint import CheckpointPlan, any_checkpoint, locate
from ..disk.paths import check_writable, distinct_dirs
from ..errors import Naming, UsageError
from ..latency.model import parse_spec
from . import resume as resume_rules
from .settings import setting

@dataclass(frozen=True)
class Leg:
    """One run of a job (the command line's ``compare`` has two)."""

    algorithm: str  # teleportation, dsgd or search
    tokens: int | None  # the k a resumed checkpoint must have (None: Algorithm 2, which
    # takes no checkpoints)
    checkpoints: Path | None  # where its checkpoints go (None: nowhere)


@dataclass(frozen=True)
class Places:
    """Where a job writes and what it resumes (absolute paths)."""

    out: Path | None = None
    checkpoint_dir: Path | None = None  # as given (a run's own directory: Leg.checkpoints)
    resume: Path | None = None
    every: int = setting("checkpoint_every").default  # periodic checkpoints (the table's
    keep: int = setting("keep_checkpoints").default  # defaults, written once there)
    compare: bool = False  # two runs, each resuming its own checkpoint where there is one


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` found: each run's checkpoint plan (by algorithm; None: no
    checkpoints at all) and the (directory, name) pairs the job locks while it runs."""

    plans: tuple[tuple[str, CheckpointPlan | None], ...] = ()
    hold: tuple[tuple[Path, str], ...] = ()

    def plan(self, algorithm: str) -> CheckpointPlan | None:
        return dict(self.plans).get(algorithm)


def check_disk(legs, places: Places, *, nodes: int, rounds: int | None, record: dict,
               naming: Naming, latency: str | None = None) -> Prepared:
    """Check ``legs`` (the job's runs) against the disk, on this process, before any
    communication, and return their plans and the directories to lock; UsageError (one
    line) otherwise. ``record``: the settings a checkpoint keeps, compared with the
    resumed one's; ``latency``: the latency spec (a matrix file is read here); ``rounds``
    None: not known yet (the front end checks a resumed round against them later)."""
    try:
        return _check_disk(tuple(legs), places, nodes, rounds, record, naming, latency)
    except OSError as exc:  # an unreadable directory or file
        raise UsageError(f"cannot read the checkpoint or output directory: "
                         f"{exc.strerror or exc}") from None


def _check_disk(legs, places: Places, nodes, rounds, record, naming, latency) -> Prepared:
    if latency is not None:
        try:
            parse_spec(latency, nodes)  # reads and checks a matrix file
        except UsageError as exc:
            raise naming.retell(exc) from None
    if places.checkpoint_dir is not None:
        check_writable(naming.name("checkpoint_dir"), places.checkpoint_dir)
    if places.out is not None:
        check_writable(naming.name("out"), places.out)
    found = {leg.algorithm: (None, None) for leg in legs}
    if all(leg.tokens is not None for leg in legs):  # (Algorithm 2: no checkpoints)
        found = _resumed(legs, places, nodes, rounds, record, naming)
    plans = tuple((leg.algorithm,
                   None if leg.tokens is None and leg.checkpoints is None else
                   CheckpointPlan(leg.checkpoints, places.every, places.keep,
                                  *found[leg.algorithm]))
                  for leg in legs)
    return Prepared(plans, tuple(held(legs, places, naming)))


def _resumed(legs, places: Places, nodes, rounds, record, naming) -> dict:
    """Each run's resumed checkpoint and its manifest ((None, None): it starts afresh),
    checked; every checkpoint directory checked free of another run's."""
    found = {}
    resume = places.resume
    for leg in legs:
        source, manifest = None, None
        if resume is not None:
            given = naming.given("resume", str(resume))
            hit = locate(resume, leg.algorithm, places.compare)
            if hit is None and not places.compare:
                other = any_checkpoint(resume)
                what = f" (it holds a {other[1].get('algorithm')} run)" if other else ""
                raise UsageError(f"{given}: no complete checkpoint of a {leg.algorithm} "
                                 f"run there{what}")
            if hit is not None:  # (compare: a run without one yet starts afresh)
                source = resume_rules.check_source(given, hit[0], hit[1], nodes=nodes,
                                                   k=leg.tokens, rounds=rounds,
                                                   current=record, naming=naming)
                manifest = hit[1]
        if leg.checkpoints is not None:
            hint = naming.given("resume", str(places.out or leg.checkpoints))
            resume_rules.check_target(leg.checkpoints, source, hint, naming)
        found[leg.algorithm] = (source, manifest)
    if resume is not None and all(source is None for source, _ in found.values()):
        raise UsageError(f"{naming.given('resume', str(resume))}: no complete checkpoint "
                         f"of this run there")
    return found


def held(legs, places: Places, naming: Naming) -> list[tuple[Path, str]]:
    """The directories a job writes into and holds alone while it runs: its output
    directory, a checkpoint directory given, and each run's checkpoint directory when
    it takes periodic checkpoints; each once."""
    found = [(path, naming.name(name)) for path, name in
             ((places.out, "out"), (places.checkpoint_dir, "checkpoint_dir"))
             if path is not None]
    if places.every:
        found += [(leg.checkpoints, "checkpoint directory") for leg in legs
                  if leg.checkpoints is not None and leg.tokens is not None]
    return distinct_dirs(found)
