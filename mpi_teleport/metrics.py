"""Logging rounds, timing and the run summary, shared by the simulator and MPI rank 0.

At a logging round the token matrix (rows in token order) is evaluated by the problem;
the time spent doing so is excluded from ``time_s``, so logging never disturbs the
round timings. The same code writes the same records in both back ends, which is what
lets tests compare their ``metrics.jsonl`` with ``==``.
"""
from __future__ import annotations

import time

import numpy as np

from . import topology as topo


class NonFiniteError(RuntimeError):
    """The loss became NaN or infinite: the run stops with a message naming round and token."""


def logged_on_root(transport, log):
    """``log()`` on rank 0, its result shared with every rank; a NonFiniteError it raises
    is raised on every rank alike (so all stop at the same round). A collective."""
    verdict = (None, None)
    if transport.rank == 0:
        try:
            verdict = (log(), None)
        except NonFiniteError as exc:
            verdict = (None, str(exc))
    value, error = transport.bcast(verdict)
    if error:
        raise NonFiniteError(error)
    return value


def is_log_round(r: int, every: int, rounds: int) -> bool:
    return r == 0 or r % every == 0 or r == rounds


class Recorder:
    def __init__(self, cfg, problem, files, algorithm: str, k: int, progress=None):
        self.cfg, self.problem, self.files = cfg, problem, files
        self.algorithm, self.k = algorithm, k
        self.progress = progress
        self.rounds_to_target = None
        self.last: dict = {}
        self.rounds_run = 0
        self._start = time.perf_counter()
        self._excluded = 0.0

    def elapsed(self) -> float:
        """Seconds since the start, logging time excluded."""
        return time.perf_counter() - self._start - self._excluded

    def pause(self) -> float:
        """Start of a logging interval (its time is excluded)."""
        return time.perf_counter()

    def resume(self, since: float) -> None:
        self._excluded += time.perf_counter() - since

    def state(self) -> dict:
        """What a checkpoint keeps of the recorder (checkpoint.py): the records so far,
        rounds_to_target, the last record and the elapsed time (logging excluded)."""
        return {"records": list(self.files.records), "rounds_to_target": self.rounds_to_target,
                "last": self.last, "rounds_run": self.rounds_run, "elapsed": self.elapsed()}

    def restore(self, state: dict) -> None:
        """Continue from :meth:`state`: time_s goes on from the saved elapsed time and
        metrics.jsonl is rewritten with the saved records (later ones are dropped)."""
        self.rounds_to_target = state["rounds_to_target"]
        self.last = state["last"] or {}
        self.rounds_run = state["rounds_run"]
        self._start = time.perf_counter() - state["elapsed"]
        self._excluded = 0.0
        self.files.restore(state["records"])

    def log(self, r: int, x: np.ndarray, time_s: float, extra: dict | None = None) -> bool:
        """Record round r from the token matrix x; returns True when the run should stop."""
        metrics = self.problem.evaluate(x)
        if not self.problem.finite(metrics):
            bad = np.nonzero(~np.isfinite(x).all(axis=1))[0]
            token = int(bad[0]) if len(bad) else 0
            raise NonFiniteError(
                f"the {self.problem.metric} became non-finite at round {r} (token {token}); "
                f"lower --lr (now {self.cfg.lr})"
            )
        record = {"round": r, "time_s": time_s, **metrics, **(extra or {})}
        self.files.metric(record)
        self.last = record
        self.rounds_run = r
        if self.rounds_to_target is None and self.problem.reached(metrics, self.cfg.target):
            self.rounds_to_target = r
        if self.progress is not None:
            self.progress.update(r, f"{self.problem.metric} {metrics[self.problem.metric]:.2e}",
                                 force=r == self.cfg.rounds)
        return self.cfg.stop_at_target and self.rounds_to_target is not None

    def summary(self, wall_time_s: float, extra: dict | None = None) -> dict:
        cfg = self.cfg
        metric = self.problem.metric
        out = {
            "algorithm": self.algorithm,
            "variant": cfg.variant if self.algorithm == "teleportation" else None,
            "n": cfg.nodes,
            "k": self.k,
            "topology": cfg.topology,
            "spectral_gap": topo.spectral_gap(cfg.topology, self.k) if self.k <= 2048 else None,
            "problem": cfg.problem,
            "rounds_run": self.rounds_run,
            "target": cfg.target,
            "rounds_to_target": self.rounds_to_target,
            f"final_{metric}": self.last.get(metric),
            "final_consensus": self.last.get("consensus"),
            "wall_time_s": wall_time_s,
            "seed": cfg.seed,
            **(extra or {}),
        }
        if self.progress is not None:
            self.progress.close()
        self.files.summary(out)
        return out
