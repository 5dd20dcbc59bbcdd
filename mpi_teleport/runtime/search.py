"""Algorithm 2: efficient search for the number of active nodes (``--k auto``).

Phase 1 runs Teleportation with k = n for T rounds. Phase 2 runs every candidate
k in {1, 2, 4, ..., 2^(floor(log2(n+1)) - 1)} for T rounds *concurrently*, on disjoint
node sets: each round one shared random ordering of the nodes is cut into blocks of
those sizes (schedule.search_blocks), so a node serves at most one run per round and runs
exchange messages only within themselves: 2T rounds, not n*T. Round numbers are global
(phase 2 is rounds T..2T-1), so each round's randomness and time-varying topology are
distinct. The phases are :meth:`RunSpec.phases`; the engine's one loop runs them on
either back end; this module records them and chooses.

Which candidate is "best" the paper leaves open (its Alg. 2 footnote: the smallest
gradient norm in theory, the best validation accuracy in practice), so it is a choice,
``--k-select`` (``RunSpec.k_select``), among :data:`CRITERIA`, all computed from the
problem's ``validate`` (the validation metric, e.g. validation accuracy; for the
synthetic problem ||mean_m x_m - x*||^2) on the root:

``averaged``
    the averaged model's validation metric at the candidate's last round (round T of its
    phase): ``validate(X)`` for the token matrix X.
``tokens``
    the mean over the candidate's tokens of each token's own validation metric at its last
    round: (1/k) sum_m ``validate(X[m:m+1])`` (synthetic problem: mean_m ||x_m - x*||^2,
    the error Figure 2 plots and ``--target`` measures).
``time-average``
    the mean of the averaged model's validation metric over the candidate's phase: over
    the logged rounds after the phase's first step (T+1..2T in global rounds for phase 2,
    1..T for phase 1), i.e. every round with ``--log-every 1`` and every R-th round plus
    the last with ``--log-every R`` (the theory's time-averaged criterion, measured where
    the run evaluates anyway; the shared starting point x0 is left out, it is the same for
    every candidate).

Every criterion is computed for every candidate whichever one chooses, and the summary
reports all of them; ties go to the smaller k. Each logged round after a phase's first
step records the averaged model's validation metric (``validation`` in phase 1,
``validation_by_k`` in phase 2), so the time-average can be recomputed from
``metrics.jsonl``. The cost, on the root: one ``validate`` per candidate and logged round,
plus k more per candidate at its last round (cheap for the synthetic problem; for a
network, a pass over the validation split each: raise ``--log-every`` if it shows).

With ``--epochs E`` each phase runs T = ceil(E * n_train / (batch_size * n)) rounds: the
rounds in which phase 1's n active nodes process E epochs; phase 2 runs as many rounds
(its candidate k processes k/n of E epochs). The command line says so in
``config.json`` and ``summary.json`` (:func:`mpi_teleport.session.prepare.phase_rounds`).
"""
from __future__ import annotations

import math

import numpy as np

from ..core import schedule
from ..errors import NonFiniteError, UsageError
from ..core.contract import check_metrics
from .metrics import Stopwatch, initial_not_finite, non_finite

CRITERIA = ("averaged", "tokens", "time-average")


def check_select(select) -> str:
    """The criterion name, or UsageError saying which exist."""
    if select not in CRITERIA:
        raise UsageError(f"select must be one of {', '.join(CRITERIA)}, got {select!r}")
    return select


def describe_criteria(validation: str) -> dict:
    """What each criterion measures, in words (``validation``: the problem's metric name)."""
    own = validation.removeprefix("averaged-model ")
    return {
        "averaged": f"{own} of the averaged model at the candidate's last round",
        "tokens": f"mean over the candidate's tokens of each token's own {own} at its last round",
        "time-average": f"mean of the averaged model's {own} over the logged rounds of the "
                        f"candidate's phase after its first step",
    }


def best(values: dict, higher_is_better: bool) -> int:
    """The k with the best value (ties: the smaller k)."""
    sign = -1.0 if higher_is_better else 1.0
    return min(values, key=lambda k: (sign * values[k], k))


def token_mean(validate, x: np.ndarray) -> float:
    """(1/k) sum_m validate(x[m:m+1]), summed exactly (math.fsum) in token order."""
    return math.fsum(float(validate(x[m:m + 1])) for m in range(len(x))) / len(x)


class SearchRecorder(Stopwatch):
    """Records both phases, tracks every candidate under every criterion, and writes the
    summary (root); an :class:`~mpi_teleport.core.interfaces.RunRecorder`."""

    def __init__(self, spec, logging, problem, files, progress=None, problem_name=None):
        self.spec, self.logging, self.problem, self.files = spec, logging, problem, files
        self.progress = progress
        self.problem_name = problem_name or problem.name
        self.n = spec.nodes
        self.select = check_select(getattr(spec, "k_select", "averaged"))
        self.ks = schedule.candidate_ks(self.n)
        self.values: dict[str, dict[int, float]] = {c: {} for c in CRITERIA}
        self.trace: dict[int, list[float]] = {k: [] for k in [*self.ks, self.n]}
        self.final_error: dict[int, float] = {}
        self.final_x: dict[int, np.ndarray] = {}
        self.reached: dict[int, int | None] = {k: None for k in [*self.ks, self.n]}
        self.start_clock()

    @property
    def candidates(self) -> dict[int, float]:
        """Each candidate's value under the chosen criterion."""
        return self.values[self.select]

    def _check(self, m: dict, r: int, k: int) -> None:
        check_metrics(self.problem, m)
        if not self.problem.finite(m):
            if r == 0:
                raise NonFiniteError(initial_not_finite(self.problem))
            raise NonFiniteError(non_finite(self.problem, m, r, f"run k={k}", self.spec.lr,
                                            self.logging.naming))

    def validates(self, phase: int, r: int) -> bool:
        """Whether round r of ``phase`` uses the averaged model's validation metric: every
        logged round but the phase's first (the time-average criterion sums them)."""
        return r != phase * self.spec.rounds

    def record(self, phase: int, r: int, mats: list, time_s: float, extra: dict,
               evaluated=None) -> bool:
        """``evaluated``: the back end's :class:`~mpi_teleport.core.evaluation.Evaluations`
        (metrics, and validation on :meth:`validates` rounds); else evaluated here."""
        if evaluated is not None:
            self._given = evaluated
        try:
            if phase == 0:
                self.phase1(r, mats[0], time_s, extra)
            else:
                self.phase2(r, mats, time_s, extra)
        finally:
            self._given = None
        return False

    _given = None

    def record_training(self, r: int, x: np.ndarray, time_s: float, extra: dict) -> bool:
        """Never called: Algorithm 2 evaluates every record it makes (its criteria need
        the metric), so it has no records of training values only (``eval_every``)."""
        raise RuntimeError("Algorithm 2 evaluates every record: eval_every does not apply")

    def _evaluate(self, q: int, x: np.ndarray) -> dict:
        given = self._given
        return self.problem.evaluate(x) if given is None else given.metrics[q]

    def _validate(self, q: int, x: np.ndarray) -> float:
        given = self._given
        if given is None or given.validation is None:
            return float(self.problem.validate(x))
        return float(given.validation[q])

    def _token_mean(self, q: int, x: np.ndarray) -> float:
        given = self._given
        if given is None or given.token_validation is None:
            return token_mean(self.problem.validate, x)
        return math.fsum(float(v) for v in given.token_validation[q]) / len(x)

    def validates_tokens(self, phase: int, r: int) -> bool:
        """Whether round r of ``phase`` needs each token's own validation (the phase's last
        round: the ``tokens`` criterion)."""
        return r == (phase + 1) * self.spec.rounds

    def _candidate(self, q: int, k: int, r: int, start: int, x: np.ndarray, m: dict) -> float | None:
        """Track candidate k (run q) at round r of its phase [start, start + T]: the
        averaged model's validation metric (None at the phase's first round) and, at its
        last round, every criterion."""
        if r == start:
            return None
        value = self._validate(q, x)
        self.trace[k].append(value)
        if r == start + self.spec.rounds:
            self.values["averaged"][k] = value
            self.values["tokens"][k] = self._token_mean(q, x)
            self.values["time-average"][k] = math.fsum(self.trace[k]) / len(self.trace[k])
            self.final_error[k] = m[self.problem.metric]
            self.final_x[k] = x
        return value

    def phase1(self, r: int, x: np.ndarray, time_s: float, extra: dict) -> None:
        """Round r of phase 1 (k = n), r in 0..T."""
        metric, target = self.problem.metric, self.logging.target
        m = self._evaluate(0, x)
        self._check(m, r, self.n)
        if self.reached[self.n] is None and self.problem.reached(m, target):
            self.reached[self.n] = r
        value = self._candidate(0, self.n, r, 0, x, m)
        validation = {} if value is None else {"validation": value}
        self.files.metric({"round": r, "time_s": time_s, "phase": 1, "k": self.n, **m,
                           **validation, **extra})
        if self.progress:
            self.progress.update(r, f"phase 1 {metric} {m[metric]:.2e}")

    def phase2(self, r: int, xs: list[np.ndarray], time_s: float, extra: dict) -> None:
        """Global round r of phase 2 (T..2T); xs[q] = token rows of the run k = 2^q."""
        T, metric, target = self.spec.rounds, self.problem.metric, self.logging.target
        errors, consensus, validation = {}, {}, {}
        for q, (k, x) in enumerate(zip(self.ks, xs)):
            m = self._evaluate(q, x)
            self._check(m, r, k)
            errors[str(k)], consensus[str(k)] = m[metric], m.get("consensus")
            if self.reached[k] is None and self.problem.reached(m, target):
                self.reached[k] = r - T
            value = self._candidate(q, k, r, T, x, m)
            if value is not None:
                validation[str(k)] = value
        extra_validation = {"validation_by_k": validation} if validation else {}
        self.files.metric({"round": r, "time_s": time_s, "phase": 2,
                           f"{metric}_by_k": errors, "consensus_by_k": consensus,
                           **extra_validation, **extra})
        if self.progress:
            self.progress.update(r, f"phase 2 {metric} {min(errors.values()):.2e}..{max(errors.values()):.2e}")

    def chosen_by(self, criterion: str) -> int:
        return best(self.values[criterion], self.problem.validation_higher_is_better)

    def chosen(self) -> int:
        return self.chosen_by(self.select)

    def final_tokens(self):
        return self.final_x.get(self.chosen()) if self.candidates else None

    def summary(self, wall: float, extra: dict | None = None) -> dict:
        from ..core import topology as topo

        spec, k = self.spec, self.chosen()

        def by_k(values: dict) -> dict:
            return {str(c): values[c] for c in sorted(values)}

        out = {
            "algorithm": "teleportation",
            "variant": spec.variant,
            "n": self.n,
            "k": k,
            "k_search": "auto",
            "k_select": self.select,
            "validation": self.problem.validation,
            "candidates": by_k(self.candidates),
            "candidates_by_criterion": {c: by_k(self.values[c]) for c in CRITERIA},
            "k_by_criterion": {c: self.chosen_by(c) for c in CRITERIA},
            "criteria": describe_criteria(self.problem.validation),
            "time_average_rounds": len(self.trace[k]),
            f"candidate_final_{self.problem.metric}": by_k(self.final_error),
            "candidate_rounds_to_target": by_k(self.reached),
            "topology": topo.describe(spec.topology),
            "problem": self.problem_name,
            "rounds_run": 2 * spec.rounds,
            "rounds_per_phase": spec.rounds,
            "target": self.logging.target,
            "rounds_to_target": self.reached[k],
            f"final_{self.problem.metric}": self.final_error[k],
            "wall_time_s": wall,
            "seed": spec.seed,
            **(extra or {}),
        }
        if self.progress:
            self.progress.close()
        self.files.summary(out)
        return out
