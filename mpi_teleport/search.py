"""Algorithm 2: efficient search for the number of active nodes (``--k auto``).

Phase 1 runs Teleportation with k = n for T rounds. Phase 2 runs every candidate
k in {1, 2, 4, ..., 2^(floor(log2(n+1)) - 1)} for T rounds *concurrently*, on disjoint
node sets: each round one shared random ordering of the nodes is cut into blocks of
those sizes (schedule.search_blocks), so a node serves at most one run per round and runs
exchange messages only within themselves. The best run by the validation metric (the
error of the averaged model, for the synthetic problem) wins: 2T rounds, not n*T.
Round numbers are global (phase 2 is rounds T..2T-1), so each round's randomness and
time-varying topology are distinct. The simulator and the MPI runtime share everything
here except how the vectors move.
"""
from __future__ import annotations

import time

import numpy as np

from . import schedule
from . import topology as topo
from .algorithms import learning_rate, local_step, lr_at
from .metrics import NonFiniteError, is_log_round, logged_on_root


class SearchRecorder:
    """Records both phases, tracks every candidate, and writes the summary (rank 0)."""

    def __init__(self, cfg, problem, files, progress=None):
        self.cfg, self.problem, self.files, self.progress = cfg, problem, files, progress
        self.n = cfg.nodes
        self.ks = schedule.candidate_ks(self.n)
        self.candidates: dict[int, float] = {}
        self.final_error: dict[int, float] = {}
        self.reached: dict[int, int | None] = {k: None for k in [*self.ks, self.n]}
        self._start = time.perf_counter()
        self._excluded = 0.0
        self._paused = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self._start - self._excluded

    def pause(self) -> None:
        self._paused = time.perf_counter()

    def resume(self) -> None:
        self._excluded += time.perf_counter() - self._paused

    def _check(self, m: dict, r: int, k: int) -> None:
        if not self.problem.finite(m):
            raise NonFiniteError(f"the loss became non-finite at round {r} (run k={k}); "
                                 f"lower --lr (now {self.cfg.lr})")

    def phase1(self, r: int, x: np.ndarray) -> None:
        """Round r of phase 1 (k = n), r in 0..T."""
        metric = self.problem.metric
        m = self.problem.evaluate(x)
        self._check(m, r, self.n)
        if self.reached[self.n] is None and self.problem.reached(m, self.cfg.target):
            self.reached[self.n] = r
        self.files.metric({"round": r, "time_s": self.elapsed(), "phase": 1, "k": self.n, **m})
        if r == self.cfg.rounds:
            self.candidates[self.n] = self.problem.validate(x)
            self.final_error[self.n] = m[metric]
        if self.progress:
            self.progress.update(r, f"phase 1 {metric} {m[metric]:.2e}")

    def phase2(self, r: int, xs: list[np.ndarray]) -> None:
        """Global round r of phase 2 (T..2T); xs[q] = token rows of the run k = 2^q."""
        T, metric = self.cfg.rounds, self.problem.metric
        errors, consensus = {}, {}
        for k, x in zip(self.ks, xs):
            m = self.problem.evaluate(x)
            self._check(m, r, k)
            errors[str(k)], consensus[str(k)] = m[metric], m["consensus"]
            if self.reached[k] is None and self.problem.reached(m, self.cfg.target):
                self.reached[k] = r - T
            if r == 2 * T:
                self.candidates[k] = self.problem.validate(x)
                self.final_error[k] = m[metric]
        self.files.metric({"round": r, "time_s": self.elapsed(), "phase": 2,
                           f"{metric}_by_k": errors, "consensus_by_k": consensus})
        if self.progress:
            self.progress.update(r, f"phase 2 {metric} {min(errors.values()):.2e}..{max(errors.values()):.2e}")

    def chosen(self) -> int:
        sign = -1.0 if self.problem.validation_higher_is_better else 1.0
        return min(self.candidates, key=lambda k: (sign * self.candidates[k], k))

    def summary(self, wall: float, backend: str) -> dict:
        cfg, k = self.cfg, self.chosen()
        out = {
            "algorithm": "teleportation",
            "variant": cfg.variant,
            "n": self.n,
            "k": k,
            "k_search": "auto",
            "validation": self.problem.validation,
            "candidates": {str(c): self.candidates[c] for c in sorted(self.candidates)},
            f"candidate_final_{self.problem.metric}": {str(c): self.final_error[c] for c in sorted(self.final_error)},
            "candidate_rounds_to_target": {str(c): self.reached[c] for c in sorted(self.reached)},
            "topology": cfg.topology,
            "problem": cfg.problem,
            "rounds_run": 2 * cfg.rounds,
            "rounds_per_phase": cfg.rounds,
            "target": cfg.target,
            "rounds_to_target": self.reached[k],
            f"final_{self.problem.metric}": self.final_error[k],
            "wall_time_s": wall,
            "seed": cfg.seed,
            "backend": backend,
        }
        if self.progress:
            self.progress.close()
        self.files.summary(out)
        return out


def phase1_holders(cfg, t: int) -> np.ndarray:
    return schedule.holders(cfg.seed, cfg.nodes, cfg.nodes, t)


def phase2_roster(cfg, t: int) -> list[np.ndarray]:
    return schedule.search_blocks(cfg.seed, cfg.nodes, t)


def simulate_search(cfg, problem, files, progress=None) -> dict:
    """Algorithm 2 in the simulator, vectorised over each run's tokens."""
    from .sim import mix

    rec = SearchRecorder(cfg, problem, files, progress)
    T, n, x0 = cfg.rounds, cfg.nodes, problem.initial()
    lr = learning_rate(cfg, 2 * T)
    start = time.perf_counter()

    def advance(x, v, holders, t):
        y = local_step(problem, holders, x, v, t, lr_at(lr, t), cfg.momentum)
        return mix(topo.mixing(cfg.topology, len(x), t), y)

    x = np.tile(x0, (n, 1))
    v = np.zeros_like(x) if cfg.momentum > 0 else None
    rec.phase1(0, x)
    for t in range(T):
        x = advance(x, v, phase1_holders(cfg, t), t)
        if is_log_round(t + 1, cfg.log_every, T):
            rec.pause()
            rec.phase1(t + 1, x)
            rec.resume()
    xs = [np.tile(x0, (k, 1)) for k in rec.ks]
    vs = [np.zeros_like(x) if cfg.momentum > 0 else None for x in xs]
    rec.phase2(T, xs)
    for t in range(T, 2 * T):
        roster = phase2_roster(cfg, t)
        xs = [advance(x, v, holders, t) for x, v, holders in zip(xs, vs, roster)]
        if is_log_round(t + 1 - T, cfg.log_every, T):
            rec.pause()
            rec.phase2(t + 1, xs)
            rec.resume()
    return rec.summary(time.perf_counter() - start, "sim")


def mpi_search(cfg, problem, transport, files, progress=None) -> dict | None:
    """Algorithm 2 over MPI: both phases with the same per-rank loop as a single run."""
    from .algorithms.teleportation import Node, new_state, run_overlap, run_simple

    root = transport.rank == 0
    rec = SearchRecorder(cfg, problem, files if root else None, progress if root else None)
    T, d, x0 = cfg.rounds, problem.dim, problem.initial()
    loop = run_simple if cfg.variant == "simple" else run_overlap

    def collective(log):
        """Log on rank 0 and agree on errors (every rank calls it), off the clock."""
        rec.pause()
        try:
            logged_on_root(transport, log)
        finally:
            rec.resume()

    def on_phase1(r, roster, x, run=0) -> bool:
        if is_log_round(r, cfg.log_every, T):
            rows = transport.gather_rows(x, roster[0], d, problem.dtype)
            collective(lambda: rec.phase1(r, rows))
        return False

    def on_phase2(r, roster, x, run=-1) -> bool:
        if is_log_round(r - T, cfg.log_every, T):
            rows = [transport.gather_rows(x if run == q else None, holders, d, problem.dtype)
                    for q, holders in enumerate(roster)]
            collective(lambda: rec.phase2(r, rows))
        return False

    start = time.perf_counter()
    transport.barrier()
    node = Node(transport.rank, problem, transport, lambda t: phase1_holders(cfg, t),
                cfg.nodes, cfg.topology, learning_rate(cfg, 2 * T), cfg.momentum)
    state = new_state(node, x0)
    on_phase1(0, node.roster(0), state.x if node.role(node.roster(0))[1] >= 0 else None)
    loop(node, range(T), state, on_phase1)
    node = Node(transport.rank, problem, transport, lambda t: phase2_roster(cfg, t),
                cfg.nodes, cfg.topology, learning_rate(cfg, 2 * T), cfg.momentum)
    state = new_state(node, x0, start=T)
    run, _ = node.role(node.roster(T))
    on_phase2(T, node.roster(T), state.x if run >= 0 else None, run)
    loop(node, range(T, 2 * T), state, on_phase2, fresh=True)  # phase 2 starts from x0
    wall = time.perf_counter() - start
    return rec.summary(wall, "mpi") if root else None
