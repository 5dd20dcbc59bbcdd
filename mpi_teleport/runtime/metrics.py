"""Logging rounds, timing and the run summary, shared by the simulator and MPI rank 0.

At a logging round the token matrix (rows in token order) is evaluated by the problem;
the time spent doing so is excluded from ``time_s``, so logging never disturbs the
round timings. The same code writes the same records in both back ends, which is what
lets tests compare their ``metrics.jsonl`` with ``==``.
"""
from __future__ import annotations

import time

import numpy as np

from ..core import topology as topo
from ..core.spec import epoch_position


from ..core.contract import check_metrics  # noqa: E402
from ..errors import NonFiniteError  # noqa: E402  (re-exported: metrics.NonFiniteError)


def initial_not_finite(problem) -> str:
    """The message of a non-finite metric at round 0, before any step: not the step size."""
    return (f"the {problem.metric} is non-finite at round 0, at the initial model (no step "
            f"taken yet): the evaluation data or the problem's evaluate() gives NaN or inf "
            f"(check the data for NaN/inf; the step size is not the cause)")


def non_finite(problem, metrics: dict, r: int, where: str, lr, naming) -> str:
    """The message of a metric turning non-finite after round r's steps: names the
    values that did (the loss, not the headline accuracy computed from it) and the step
    size as this entry point spells it (``--lr`` or ``lr``)."""
    bad = [name for name, value in metrics.items()
           if isinstance(value, (int, float, np.floating)) and not np.isfinite(value)]
    what = " and ".join(bad) if bad else problem.metric
    return (f"the {what} became non-finite at round {r} ({where}); lower "
            f"{naming.name('lr')} (now {lr_text(lr)})")


def lr_text(lr) -> str:
    """The step size for messages: the number, or a schedule's base value."""
    return f"{lr}" if not callable(lr) else f"{getattr(lr, 'base', 'a schedule')}"


class Stopwatch:
    """A recorder's wall clock, logging time excluded (the engine brackets every logging
    interval with :meth:`pause` and :meth:`resume`)."""

    def start_clock(self, elapsed: float = 0.0) -> None:
        """Start (or, from a checkpoint, go on from ``elapsed`` seconds)."""
        self._start = time.perf_counter() - elapsed
        self._excluded = 0.0

    def elapsed(self) -> float:
        """Seconds since the start, logging time excluded."""
        return time.perf_counter() - self._start - self._excluded

    def pause(self) -> float:
        """Start of a logging interval (its time is excluded)."""
        return time.perf_counter()

    def resume(self, since: float) -> None:
        self._excluded += time.perf_counter() - since


class Recorder(Stopwatch):
    """Records one run (Teleportation or DSGD): metrics.jsonl rows and the summary (an
    :class:`~mpi_teleport.core.interfaces.CheckpointedRecorder`)."""

    def __init__(self, spec, logging, problem, files, progress=None, problem_name=None):
        self.spec, self.logging, self.problem, self.files = spec, logging, problem, files
        self.algorithm, self.k = spec.algorithm, spec.tokens
        self.problem_name = problem_name or problem.name
        self.progress = progress
        self.rounds_to_target = None
        self.last: dict = {}
        self.last_x = None  # the token matrix of the latest logged round (root)
        self.rounds_run = 0
        self.start_clock()

    def state(self) -> dict:
        """What a checkpoint keeps of the recorder: the records so far, rounds_to_target,
        the last record and the elapsed time (logging excluded)."""
        return {"records": list(self.files.records), "rounds_to_target": self.rounds_to_target,
                "last": self.last, "rounds_run": self.rounds_run, "elapsed": self.elapsed()}

    def restore(self, state: dict) -> None:
        """Continue from :meth:`state`: time_s goes on from the saved elapsed time and
        metrics.jsonl is rewritten with the saved records (later ones are dropped)."""
        self.rounds_to_target = state["rounds_to_target"]
        self.last = state["last"] or {}
        self.rounds_run = state["rounds_run"]
        self.start_clock(state["elapsed"])
        self.files.restore(state["records"])

    def forget(self, r: int) -> None:
        """Elastic: round r is recorded again (after a loss at r): drop what was recorded
        from round r on."""
        self.files.forget(r)
        if self.rounds_to_target is not None and self.rounds_to_target >= r:
            self.rounds_to_target = None
        self.last = self.files.records[-1] if self.files.records else {}

    def follow(self, r: int, record: dict, rounds_to_target) -> None:
        """Elastic, on the other processes: keep the root's record of round r (any
        survivor can take over the files)."""
        self.files.forget(r)
        self.files.metric(record)
        self.last, self.rounds_run, self.rounds_to_target = record, r, rounds_to_target

    def validates(self, phase: int, r: int) -> bool:
        """No validation metric is logged (Algorithm 2's recorder logs one)."""
        return False

    def validates_tokens(self, phase: int, r: int) -> bool:
        return False

    def record(self, phase: int, r: int, mats: list, time_s: float, extra: dict,
               evaluated=None) -> bool:
        """``evaluated``: the metrics the back end computed (an
        :class:`~mpi_teleport.core.evaluation.Evaluations`); else the problem evaluates here."""
        return self.log(r, mats[0], time_s, extra,
                        None if evaluated is None else evaluated.metrics[0])

    def log(self, r: int, x: np.ndarray, time_s: float, extra: dict | None = None,
            metrics: dict | None = None) -> bool:
        """Record round r from the token matrix x (its ``metrics`` when already computed);
        returns True when the run should stop."""
        metrics = self.problem.evaluate(x) if metrics is None else metrics
        check_metrics(self.problem, metrics)
        if not self.problem.finite(metrics):
            if r == 0:  # nothing has stepped yet: the model (checked finite) or the data
                raise NonFiniteError(initial_not_finite(self.problem))
            bad = np.nonzero(~np.isfinite(x).all(axis=1))[0]
            token = int(bad[0]) if len(bad) else 0
            raise NonFiniteError(non_finite(self.problem, metrics, r, f"token {token}",
                                            self.spec.lr, self.logging.naming))
        record = {"round": r, "time_s": time_s, **metrics, **(extra or {}), **self.where(r)}
        self.files.metric(record)
        self.last, self.last_x = record, x
        self.rounds_run = r
        target = self.logging.target
        if self.rounds_to_target is None and self.problem.reached(metrics, target):
            self.rounds_to_target = r
        if self.progress is not None:
            # (marked with its round: the bar shows it until the next evaluation)
            self.progress.headline = f"{self.problem.metric} {metrics[self.problem.metric]:.4g}"
            self.progress.headline_round = r
            loss = record.get("train_loss")
            self.progress.update(r, "" if loss is None else f"train loss {loss:.3g}",
                                 force=r == self.spec.rounds)
        return self.logging.stop_at_target and self.rounds_to_target is not None

    def record_training(self, r: int, x: np.ndarray, time_s: float, extra: dict) -> bool:
        """Round r's record without evaluation (``eval_every``): the training values in
        ``extra`` and the time; the tokens are kept for the final model. Never stops."""
        record = {"round": r, "time_s": time_s, **extra, **self.where(r)}
        self.files.metric(record)
        self.last_x = x
        self.rounds_run = r
        return False

    def final_tokens(self):
        return self.last_x

    def where(self, r: int) -> dict:
        """Where training is after r rounds, for a problem that knows its batches (a
        TorchProblem): ``epoch`` (passes over the training data, fractional),
        ``samples`` (drawn by the active nodes so far), ``lr`` (the step size of the
        round just taken; round 0's at round 0) and, as a plain loop counts, the epoch
        the round's batches belong to, the step within it and whether it ends it
        (:func:`~mpi_teleport.core.spec.epoch_position`). Empty for other problems."""
        inner = getattr(self.problem, "problem", self.problem)
        n_train, batch = getattr(inner, "n_train", None), getattr(inner, "batch_size", None)
        if not n_train or not batch or not self.k:
            return {}
        samples = int(r) * int(batch) * int(self.k)
        return {"epoch": samples / n_train, "samples": samples,
                "lr": float(self.spec.lr_at(max(int(r) - 1, 0))),
                **epoch_position(int(r), int(n_train), int(batch) * int(self.k))}

    def summary(self, wall_time_s: float, extra: dict | None = None) -> dict:
        spec = self.spec
        metric = self.problem.metric
        k = self.k
        out = {
            "algorithm": self.algorithm,
            "variant": spec.variant if self.algorithm == "teleportation" else None,
            "n": spec.nodes,
            "k": k,
            "topology": topo.describe(spec.topology),
            "spectral_gap": topo.spectral_gap(spec.topology, k) if k <= 2048 else None,
            "problem": self.problem_name,
            "rounds_run": self.rounds_run,
            "target": self.logging.target,
            "rounds_to_target": self.rounds_to_target,
            f"final_{metric}": self.last.get(metric),
            "final_consensus": self.last.get("consensus"),
            "wall_time_s": wall_time_s,
            "seed": spec.seed,
            **(extra or {}),
        }
        if self.progress is not None:
            self.progress.close()
        self.files.summary(out)
        return out
