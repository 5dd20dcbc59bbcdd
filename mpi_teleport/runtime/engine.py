"""The one loop: every run, in the simulator and over MPI, goes through :func:`execute`.

It drives the phases of a run (one for Teleportation and DSGD, two for Algorithm 2),
logging, checkpoints and resume, the stop on a signal and the virtual clock, and elastic
mode's round boundary; the back end (:mod:`mpi_teleport.runtime.backends`) only moves token
vectors and does the arithmetic::

    for phase in spec.phases():
        backend.begin(phase, start, x0, restore)       # tokens of round `start`
        for r in start .. last:                         # boundary r, then round r
            backend.keep(r)                             # elastic: round r's start kept
            log(r): the start, logging rounds           # gather tokens, evaluate (shared)
            keeper.after_round(r)                       # signals, periodic checkpoints
            backend.step(r)                             # Alg. 3 (or 1), every run at once
            backend.settle(r) or backend.recover(...)   # elastic: survive lost nodes

The round boundary (``keep``, ``enter``, ``settle``, ``recover``) is declared by
:class:`~mpi_teleport.core.interfaces.Backend` and does nothing on a plain back end, so
plain and elastic runs, and a hot spare joining at round r (``joining``), share the loop.

Logging is collective: every process gathers, the back end evaluates (``evaluate``: over
MPI every rank takes a slice of the test set when the problem allows it,
:mod:`mpi_teleport.core.evaluation`), the root writes, and every process learns the root's
verdict (stop at target, or a non-finite loss) together.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from ..checkpoint import Keeper, CheckpointPlan
from ..core.evaluation import Evaluations
from ..core.interfaces import Backend, RunRecorder
from ..core.spec import Logging, RunSpec
from ..core.training import first_batches_round, latest_mean, reports_batches
from ..disk.lock import RUN_LOCK
from ..disk.output import RUN_FILES
from ..errors import RankLost, Terminated, TooFewSurvivors
from ..trace import spans as sp
from .collective import is_agreed
from .stop_watch import watch_for


@dataclass
class Result:
    """What a run returns: its summary, its records and the averaged final model.

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> result = mt.teleportation(Quadratic(n=8, d=3), nodes=8, k=2, rounds=100, lr=0.1)
    >>> result.k, result.x.shape, [r["round"] for r in result.records][:3]
    (2, (3,), [0, 10, 20])
    >>> result.summary["rounds_run"]
    100

    Attributes
    ----------
    summary : dict
        As ``summary.json`` (on every process).
    records : list of dict
        The logged rounds, as ``metrics.jsonl``.
    x : numpy.ndarray
        The averaged model of the final tokens (of the chosen k for ``search_k``), on
        every process.
    k : int
        The number of active nodes (n for DSGD; the chosen one for ``search_k``).
    candidates : dict
        ``search_k`` only: each candidate k's validation metric.
    """

    summary: dict
    records: list = field(default_factory=list)
    x: np.ndarray | None = None
    k: int | None = None
    candidates: dict = field(default_factory=dict)


def average(x: np.ndarray) -> np.ndarray:
    """Mean of the token rows, summed in token order in float64, rounded once."""
    return (np.add.reduce(x.astype(np.float64), axis=0) / len(x)).astype(x.dtype)


class RunPlan(Protocol):
    """What :func:`execute` reads of a run's prepared settings (the front end's frozen
    ``RunSettings`` is one; the engine imports no front end): the ``spec`` and its
    ``logging``; the checkpoint ``plan`` (None: none); the ``manifest`` a checkpoint
    keeps; ``resume_from``, the run directory a resumed run continues; ``summary_extra``,
    added to summary.json; ``callback(record)``, called on the root with a copy of each
    record written, whose true return value stops the run there."""

    @property
    def spec(self) -> RunSpec: ...
    @property
    def logging(self) -> Logging: ...
    @property
    def plan(self) -> CheckpointPlan | None: ...
    @property
    def manifest(self) -> dict | None: ...
    @property
    def resume_from(self) -> Any: ...
    @property
    def summary_extra(self) -> dict | None: ...
    @property
    def callback(self) -> Callable | None: ...


def execute(problem, run: RunPlan, backend: Backend, recorder: RunRecorder, *,
            terminator=None, joining: int | None = None) -> Result:
    """Run ``run.spec`` on ``backend`` as the prepared settings ``run`` say (a
    :class:`RunPlan`); the root writes through ``recorder``. Returns the whole Result on
    every process. ``terminator``: the caller's signal handler (a checkpoint, then
    :class:`~mpi_teleport.errors.Terminated`); ``joining``: a hot spare that took a node
    over at round ``joining`` (mpi_teleport/DESIGN.md §11.1): the same loop, entered at
    that round inside the survivors' recovery, where the back end receives the node's
    tokens and the root hands over the records (``Backend.join``). The run's timeline
    goes to ``run.logging.trace`` (:mod:`mpi_teleport.trace`; None: the one
    ``$MPI_TELEPORT_TRACE`` names, if set): every process records the parts of its rounds
    and the boundaries, written at every checkpoint and at the end."""
    spec, logging, callback = run.spec, run.logging, run.callback
    plan = run.plan or CheckpointPlan(None, 0, 2)
    keeper = Keeper(plan, backend, recorder, terminator, settings=run.manifest or {},
                    spec=spec, logging=logging, resume_from=run.resume_from,
                    watch=watch_for(backend, terminator))
    x0 = problem.initial()
    restore = None
    if joining is None:
        if backend.root:  # (before the restore, which may fail: a full disk)
            _say_resumed(keeper, recorder)
        restore = keeper.restore()
        if backend.root and keeper.returns_finished and callback is not None:
            _last_record_to(callback, recorder)
        start_clock = time.perf_counter() - keeper.wall_offset
        keeper.gate()  # (collective) a signal during the set-up stops the run here
    # (a finished run returned runs no round: its trace, if any, stays as it was written)
    tracer = None if keeper.returns_finished else _tracer(
        logging.trace, backend, spec, keeper.start if joining is None else joining,
        joining is not None, outputs=_outputs(recorder, keeper))
    try:
        for index, phase in enumerate(spec.phases()):
            if joining is None:
                resuming = restore is not None and phase.start <= keeper.start <= phase.stop
                first = keeper.start if resuming else phase.start
                backend.begin(phase, first, x0, restore if resuming else None)
            else:  # (an elastic run has one phase)
                first, resuming = joining, True
                backend.begin(phase, first, x0, None)  # (buffers; the tokens come in the recovery)
                joined = tracer.boundary(first) if tracer is not None else None
                began = joined.begin(sp.JOIN) if joined is not None else 0.0
                backend.join(first)
                if joined is not None:
                    joined.boundary(first).end(sp.JOIN, began)
                start_clock = time.perf_counter()
            _rounds(index, phase, first, resuming, backend, recorder, spec, logging, keeper,
                    callback, joining=joining is not None, tracer=tracer)
    except Terminated:  # (agreed: every process stops here, after the signal's checkpoint)
        if tracer is not None:
            tracer.flush(backend, final=True)
        raise
    except BaseException as exc:
        if is_agreed(exc):  # (every process here: the stop watch's reduction completes)
            keeper.close()
        raise
    return _finish(backend, recorder, keeper, start_clock, run.summary_extra, tracer)


def _say_resumed(keeper, recorder) -> None:
    """The root's one line on what a resume does (:meth:`Keeper.resume_line`; a fresh
    run: none)."""
    from ..disk.paths import show

    out = recorder.files.out
    line = keeper.resume_line(show(out if out is not None else keeper.plan.source))
    if line is not None:
        print(line, file=sys.stderr, flush=True)


def _last_record_to(callback, recorder) -> None:
    """A finished run returned runs no round: ``callback`` still sees its last record."""
    records = recorder.files.records
    if records:
        callback(dict(records[-1]))


def _tracer(path, backend, spec, first: int, joining: bool, outputs=((), ())):
    """The run's tracer (collective: the clocks are aligned), or None without a trace."""
    from ..trace.tracer import path_from_env, start

    path = path or path_from_env()
    if path is None:
        return None
    return start(path, backend, spec.total_rounds, first, joining=joining,
                 algorithm=spec.algorithm, outputs=outputs)


def _outputs(recorder, keeper) -> tuple[list, list]:
    """(the run's own files, its checkpoint directories) as the root knows them: what a
    trace may not overwrite."""
    out = recorder.files.out
    files = [] if out is None else [out / name for name in (*RUN_FILES, RUN_LOCK)]
    if out is not None and out.name == keeper.spec.algorithm:  # (a leg of compare)
        files.append(out.parent / "comparison.json")
    return files, [d for d in (keeper.plan.dir,) if d is not None]


def _finish(backend, recorder, keeper, start_clock, summary_extra, tracer=None) -> Result:
    """The summary (root), the final checkpoint, and the whole result on every process."""
    wall = time.perf_counter() - start_clock
    summary = None
    if backend.root:
        lost = {"lost": list(backend.losses)} if backend.elastic else {}
        if backend.elastic and (backend.spares or backend.replacements):  # (hot spares)
            lost.update(replaced=list(backend.replacements), spares=backend.spares)
        summary = recorder.summary(wall, {"backend": backend.name, **(summary_extra or {}), **lost})
    keeper.finish(summary)
    if tracer is not None:
        tracer.flush(backend, final=True)
    final = recorder.final_tokens() if backend.root else None
    # every process gets the whole result (one broadcast, once)
    summary, records, x = backend.share(lambda: (
        summary, list(recorder.files.records), average(final) if final is not None else None))
    candidates = dict(summary.get("candidates", {})) if summary else {}
    return Result(summary, records, x, summary["k"] if summary else None, candidates)


def _rounds(index, phase, first, resuming, backend: Backend, recorder, spec, logging,
            keeper, callback=None, joining: bool = False, tracer=None) -> bool:
    """The rounds of one phase, boundary by boundary: round r's record and checkpoint,
    then round r, then (elastic) the agreement that nothing failed. When something did,
    the survivors go back to the last agreed boundary without the lost nodes
    (``Backend.recover``; hot spares take dead nodes over there) and redo it. A plain
    back end keeps nothing, agrees on nothing and never loses a rank (its ``keep``,
    ``enter`` and ``settle`` do nothing), so the loop is the plain one::

        log(first) unless resumed
        for r in first + 1 .. last:  step(r - 1); log(r) on logging rounds; keeper.after_round(r)

    ``joining``: a spare that took a node over at round ``first``, which starts in that
    recovery (the root hands it ``first``, ``resuming`` and the records). Returns whether
    it stopped. ``tracer``: the boundaries recorded as spans (a trace; None: off)."""
    where = {"first": first, "resuming": resuming}
    elastic = backend.elastic  # (every process keeps the records; no training values)

    def export():  # (the root's, for a spare taking a node over; elastic: a Recorder)
        return {**where, "recorder": recorder.state(), "run_id": keeper.run_id,
                "last_round": keeper._last_round,
                "trace_zero": tracer.zero if tracer is not None else None}

    def take(state):
        where.update(first=state["first"], resuming=state["resuming"])
        recorder.restore(state["recorder"])
        keeper.run_id, keeper._last_round = state["run_id"], state["last_round"]
        if tracer is not None:
            tracer.take_zero(state.get("trace_zero"))

    backend.set_handover(export, take)
    rounds = keeper.rounds(phase.start, phase.stop)
    # round 1 is recorded too where records carry the training loss (core/training.py)
    reports = not elastic and spec.algorithm != "search" and reports_batches(recorder.problem)
    each = backend.agree_every == 1  # (every boundary agreed: plain runs, --agree-every 1)

    def collective_boundary(t: int) -> bool:
        """Boundaries with a collective (a record, a checkpoint, the signal check at
        logging rounds) or the run's end: every agreement is completed before them."""
        return (t == where["first"] or t % logging.log_every == 0
                or logging.is_log_round(t, phase.start, phase.stop)
                or keeper.plan.due(t, spec.total_rounds) or t >= last)

    def agreed_boundary(t: int) -> bool:
        """Boundaries the survivors agree at and keep the tokens of: every
        ``agree_every``-th (``--agree-every``; read each time: an elastic back end may
        choose it as it goes) and every collective one."""
        return (each or (t - where["first"]) % backend.agree_every == 0
                or collective_boundary(t))

    r, stopped = first, False
    kept = r
    lost = joining
    while True:
        if not lost:
            first, resuming = where["first"], where["resuming"]
            last = rounds.stop if len(rounds) else first
            # the boundary's spans: logging and checkpoints always, elastic mode's keeping
            # and agreement on the rounds the trace samples
            bound = tracer.boundary(r) if tracer is not None else None
            each_round = bound if bound is not None and elastic and tracer.spans.wants(r) else None
            began = each_round.begin(sp.KEEP) if each_round is not None else 0.0
            if each or agreed_boundary(r):
                backend.keep(r)
                kept = r
            else:
                backend.enter(r)
            if each_round is not None:
                each_round.end(sp.KEEP, began)
            ok = True
            try:
                logged = r > first and logging.is_log_round(r, phase.start, phase.stop)
                extra_first = r > first and not logged and first_batches_round(
                    r, phase.start, phase.stop, reports)
                if (r == first and not resuming) or logged or extra_first:
                    began = bound.begin(sp.LOG) if bound is not None else 0.0
                    # (round 1's extra record is evaluated as round 0's was)
                    evaluate = logging.is_eval_round(r, phase.start, phase.stop) and (
                        not extra_first or logging.is_eval_round(phase.start, phase.start,
                                                                 phase.stop))
                    stopped = _log(index, r, backend, recorder, spec, callback, follow=elastic,
                                   trained=r > first and not elastic, evaluate=evaluate,
                                   spans=bound)
                    if bound is not None:
                        bound.boundary(r).end(sp.LOG, began)
                if r > first:
                    due = bound if bound is not None and keeper.plan.due(r, spec.total_rounds) else None
                    began = due.begin(sp.CHECKPOINT) if due is not None else 0.0
                    keeper.after_round(r, stopped, spec.total_rounds)
                    if due is not None:  # a checkpoint was written: the trace so far beside it
                        due.boundary(r).end(sp.CHECKPOINT, began)
                        tracer.flush(backend)
                if r < last and not stopped:
                    backend.step(r)
                    if not elastic:
                        _show_round(recorder, r + 1)
            except RankLost:
                ok = False
            if each or not ok or stopped or agreed_boundary(r + 1):  # (between: no agreement)
                began = each_round.begin(sp.AGREE) if each_round is not None else 0.0
                # (before a boundary without a collective the agreement may complete later)
                later = elastic and ok and not stopped and not collective_boundary(r + 1)
                lost = not backend.settle(r, ok, later)
                if each_round is not None:
                    each_round.boundary(r).end(sp.AGREE, began)
        if lost:
            lost = False
            # (the survivors go back to the last boundary agreed on: the one kept last, or
            # the one before it when that boundary's own agreement was still under way)
            r = kept if backend.rollback_to is None else backend.rollback_to
            again = tracer.boundary(r) if tracer is not None else None
            began = again.begin(sp.RECOVER) if again is not None else 0.0
            try:
                backend.recover(r)
            except RankLost:  # another loss during the recovery: the next agreement sees it
                if again is not None:
                    again.cancel(sp.RECOVER)
                continue
            except TooFewSurvivors as exc:
                recorder.files.take_over(backend.root)
                path = None if exc.all_lost else keeper.emergency(r)
                raise TooFewSurvivors(r, exc.living, exc.k, path, keeper.resume_from,
                                      all_lost=exc.all_lost, root=backend.root) from None
            if again is not None:
                again.boundary(r).end(sp.RECOVER, began)
            recorder.files.take_over(backend.root)  # the lowest survivor writes from now on
            continue
        if r >= last or stopped:
            return stopped
        r += 1


def _show_round(recorder, r: int) -> None:
    """The progress bar after round r (root): it moves every round, with the latest
    training loss this process computed (the simulator: the round's active nodes; under
    MPI the root's own batches between records). Nothing is communicated."""
    bar = recorder.progress
    if bar is None or not bar.enabled:
        return
    loss = latest_mean(recorder.problem.training_metrics(r - 1))
    bar.update(r, "" if loss is None else f"train loss {loss:.3g}")


def _log(phase: int, r: int, backend, recorder, spec, callback=None,
         follow: bool = False, trained: bool = False, evaluate: bool = True,
         spans=None) -> bool:
    """Round r's record (collective): returns whether the run stops here. The time spent
    logging (the callback's too) is excluded from ``time_s``. ``trained``: round r - 1
    was a step of this phase, whose batches' training values the record carries
    (:mod:`mpi_teleport.core.training`); ``evaluate``: the model is evaluated (else the
    record holds the training values only, ``eval_every``). ``spans``: a trace's buffer
    (set to round r) recording the barrier, the gather and the evaluation."""
    if not follow:
        # time_s is when every rank has finished round r, as virtual_time_s is the largest
        # clock: under Alg. 3 the root can be done with round r - 1 (its sends handed to
        # the network) while the next holders still receive; without this wait that time
        # fell into the excluded logging pause (measured rounds up to 30 % short on tc
        # links, benchmarks/results/wire-tc-bandwidth-2026-11-27.md). Elastic runs have just agreed at this boundary.
        began = spans.begin(sp.BARRIER) if spans is not None else 0.0
        backend.barrier()
        if spans is not None:
            spans.end(sp.BARRIER, began)
    paused = recorder.pause()
    elapsed = recorder.elapsed()
    try:
        began = spans.begin(sp.GATHER) if spans is not None else 0.0
        mats = [backend.tokens(q) for q in range(len(spec.run_ks(phase)))]
        if spans is not None:
            spans.end(sp.GATHER, began)
        vt = backend.virtual_time_s(r)  # collective; on the root when the layer is on
        extra = {}
        if trained and spec.algorithm != "search":  # (collective)
            extra.update(backend.training_metrics(recorder.problem, r - 1))
        if vt is not None:
            extra["virtual_time_s"] = vt
        if backend.losses:
            extra["lost"] = [[x["node"], x["round"]] for x in backend.losses]
        if backend.replacements:  # [[node, round, spare], ...]: a spare took the node over
            extra["replaced"] = [[x["node"], x["round"], x["spare"]] for x in backend.replacements]
        traced = spans is not None and evaluate
        began = spans.begin(sp.EVALUATE) if traced else 0.0
        evaluated = _evaluate(backend, recorder, phase, r, mats) if evaluate else None
        if traced:
            spans.end(sp.EVALUATE, began)

        def on_root() -> bool:
            written = len(recorder.files.records)
            if evaluate:
                stop = recorder.record(phase, r, mats, elapsed, extra, evaluated)
            else:
                stop = recorder.record_training(r, mats[0], elapsed, extra)
            if callback is not None:
                for record in recorder.files.records[written:]:
                    stop = bool(callback(dict(record))) or stop
            return stop

        if not follow:
            return bool(backend.share(on_root))

        def record():  # (a record of round r made before a loss at r is replaced)
            recorder.forget(r)
            stop = on_root()
            return stop, recorder.files.records[-1], recorder.rounds_to_target

        # Elastic: every process keeps the records, so that any survivor can take over
        stop, last, reached = backend.share(record)
        if not backend.root:
            recorder.follow(r, last, reached)
        return bool(stop)
    finally:
        recorder.resume(paused)


def _evaluate(backend, recorder, phase: int, r: int, mats: list) -> Evaluations:
    """The metrics of every run's tokens (and their validation where the recorder uses
    it), computed by the back end: collective, since ranks may share the work."""
    problem = recorder.problem
    metrics = [backend.evaluate(problem, x) for x in mats]
    validation = tokens = None
    if recorder.validates(phase, r):
        validation = [backend.evaluate(problem, x, "validation") for x in mats]
    if recorder.validates_tokens(phase, r):  # each token alone
        tokens = [[backend.evaluate(problem, None if x is None else x[m:m + 1], "validation")
                   for m in range(k)] for x, k in zip(mats, recorder.spec.run_ks(phase))]
    return Evaluations(metrics, validation, tokens)
