"""Algorithm 2: efficient search for the number of active nodes (``--k auto``).

Phase 1 runs Teleportation with k = n for T rounds. Phase 2 runs every candidate
k in {1, 2, 4, ..., 2^(floor(log2(n+1)) - 1)} for T rounds *concurrently*, on disjoint
node sets: each round one shared random ordering of the nodes is cut into blocks of
those sizes (schedule.search_blocks), so a node serves at most one run per round and runs
exchange messages only within themselves. The best run by the validation metric (the
error of the averaged model, for the synthetic problem) wins: 2T rounds, not n*T.
Round numbers are global (phase 2 is rounds T..2T-1), so each round's randomness and
time-varying topology are distinct. The phases are :meth:`RunSpec.phases`; the engine's
one loop runs them on either back end; this module records them.
"""
from __future__ import annotations

import time

import numpy as np

from . import schedule
from .errors import NonFiniteError
from .metrics import lr_text


class SearchRecorder:
    """Records both phases, tracks every candidate, and writes the summary (root)."""

    def __init__(self, spec, logging, problem, files, progress=None, problem_name=None):
        self.spec, self.logging, self.problem, self.files = spec, logging, problem, files
        self.progress = progress
        self.problem_name = problem_name or problem.name
        self.n = spec.nodes
        self.ks = schedule.candidate_ks(self.n)
        self.candidates: dict[int, float] = {}
        self.final_error: dict[int, float] = {}
        self.final_x: dict[int, np.ndarray] = {}
        self.reached: dict[int, int | None] = {k: None for k in [*self.ks, self.n]}
        self._start = time.perf_counter()
        self._excluded = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self._start - self._excluded

    def pause(self) -> float:
        return time.perf_counter()

    def resume(self, since: float) -> None:
        self._excluded += time.perf_counter() - since

    def _check(self, m: dict, r: int, k: int) -> None:
        if not self.problem.finite(m):
            raise NonFiniteError(f"the loss became non-finite at round {r} (run k={k}); "
                                 f"lower --lr (now {lr_text(self.spec.lr)})")

    def validates(self, phase: int, r: int) -> bool:
        """Whether round r of ``phase`` uses the validation metric (the phase's last)."""
        return r == (phase + 1) * self.spec.rounds

    def record(self, phase: int, r: int, mats: list, time_s: float, extra: dict,
               evaluated=None) -> bool:
        """``evaluated``: the back end's :class:`~mpi_teleport.evaluation.Evaluations`
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

    def _evaluate(self, q: int, x: np.ndarray) -> dict:
        given = self._given
        return self.problem.evaluate(x) if given is None else given.metrics[q]

    def _validate(self, q: int, x: np.ndarray) -> float:
        given = self._given
        if given is None or given.validation is None:
            return self.problem.validate(x)
        return given.validation[q]

    def phase1(self, r: int, x: np.ndarray, time_s: float, extra: dict) -> None:
        """Round r of phase 1 (k = n), r in 0..T."""
        metric, target = self.problem.metric, self.logging.target
        m = self._evaluate(0, x)
        self._check(m, r, self.n)
        if self.reached[self.n] is None and self.problem.reached(m, target):
            self.reached[self.n] = r
        self.files.metric({"round": r, "time_s": time_s, "phase": 1, "k": self.n, **m, **extra})
        if r == self.spec.rounds:
            self.candidates[self.n] = self._validate(0, x)
            self.final_error[self.n] = m[metric]
            self.final_x[self.n] = x
        if self.progress:
            self.progress.update(r, f"phase 1 {metric} {m[metric]:.2e}")

    def phase2(self, r: int, xs: list[np.ndarray], time_s: float, extra: dict) -> None:
        """Global round r of phase 2 (T..2T); xs[q] = token rows of the run k = 2^q."""
        T, metric, target = self.spec.rounds, self.problem.metric, self.logging.target
        errors, consensus = {}, {}
        for q, (k, x) in enumerate(zip(self.ks, xs)):
            m = self._evaluate(q, x)
            self._check(m, r, k)
            errors[str(k)], consensus[str(k)] = m[metric], m.get("consensus")
            if self.reached[k] is None and self.problem.reached(m, target):
                self.reached[k] = r - T
            if r == 2 * T:
                self.candidates[k] = self._validate(q, x)
                self.final_error[k] = m[metric]
                self.final_x[k] = x
        self.files.metric({"round": r, "time_s": time_s, "phase": 2,
                           f"{metric}_by_k": errors, "consensus_by_k": consensus, **extra})
        if self.progress:
            self.progress.update(r, f"phase 2 {metric} {min(errors.values()):.2e}..{max(errors.values()):.2e}")

    def chosen(self) -> int:
        sign = -1.0 if self.problem.validation_higher_is_better else 1.0
        return min(self.candidates, key=lambda k: (sign * self.candidates[k], k))

    def final_tokens(self):
        return self.final_x.get(self.chosen()) if self.candidates else None

    def summary(self, wall: float, extra: dict | None = None) -> dict:
        from . import topology as topo

        spec, k = self.spec, self.chosen()
        out = {
            "algorithm": "teleportation",
            "variant": spec.variant,
            "n": self.n,
            "k": k,
            "k_search": "auto",
            "validation": self.problem.validation,
            "candidates": {str(c): self.candidates[c] for c in sorted(self.candidates)},
            f"candidate_final_{self.problem.metric}": {str(c): self.final_error[c] for c in sorted(self.final_error)},
            "candidate_rounds_to_target": {str(c): self.reached[c] for c in sorted(self.reached)},
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
