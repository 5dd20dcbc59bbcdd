"""Every node in this process: the simulator's back end, vectorised over tokens.

Teleportation keeps only the k token rows of each run, O(k d) memory, so n = 10^6 nodes
costs no more per round than n = 100. Algorithms 1 and 3 compute the same numbers (they
differ in when vectors travel, not in what is summed), so one update serves both; the
variant matters only to the virtual clock (:class:`mpi_teleport.latency.virtual_clock.Oracle`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ...core import topology as topo
from ...core.algorithms import local_step, mix
from ...checkpoint import LAYOUT_MATRIX, load_matrix, save_matrix
from ...core.training import round_means


class LocalBackend:
    """All tokens of every run as (k, d) matrices in this process (an
    :class:`~mpi_teleport.core.interfaces.Backend`)."""

    root = True
    rank = 0
    name = "sim"
    layout = LAYOUT_MATRIX
    agree_every = 1  # (elastic mode's failure plan: its losses are seen at the boundary they name)
    rollback_to: int | None = None  # (and rolled back to it)
    elastic = False  # (SimulatedElasticBackend, mpi_teleport/elastic/simulated.py: --fail)
    losses: Sequence = ()
    replacements: Sequence = ()
    spares = 0

    def __init__(self, problem, spec, oracle=None):
        self.problem, self.spec, self.oracle = problem, spec, oracle
        self.xs: list[np.ndarray] = []
        self.vs: list[np.ndarray | None] = []
        self._spare: list[np.ndarray] = []
        self._ybuf: list[np.ndarray] = []
        self._spans = None  # a trace's span buffer (mpi_teleport.trace); None: off

    # -- placing tokens ----------------------------------------------------------------
    def begin(self, phase, start: int, x0: np.ndarray, restore=None) -> None:
        """The phase's tokens at round ``start``: x0 for every token, or the checkpoint's
        matrices (``restore`` = (directory, manifest))."""
        slots = self.spec.state_slots  # (momentum: 1; Adam: 2 state vectors per token)
        phase = self.phase = self.placing_phase(phase, start, restore)
        ks = [len(h) for h in phase.roster(start)]
        if restore is not None:
            arrays = load_matrix(*restore)
            self.xs = [arrays["x"].astype(x0.dtype, copy=True).reshape(ks[0], -1)]
            self.vs = [arrays["v"].astype(x0.dtype, copy=True).reshape(ks[0], -1)
                       if slots else None]
        else:
            self.xs = [np.tile(x0, (k, 1)) for k in ks]
            self.vs = [np.zeros((len(x), slots * x.shape[1]), x.dtype) if slots else None
                       for x in self.xs]
        self.reset_buffers()

    def reset_buffers(self) -> None:
        """The rounds' work buffers, shaped as the token matrices are now (made once, not
        every round; again after elastic mode changed the tokens)."""
        self._spare = [np.empty_like(x) for x in self.xs]
        self._ybuf = [np.empty_like(x) for x in self.xs]

    # -- one round -----------------------------------------------------------------------
    def step(self, t: int) -> None:
        spec = self.spec
        lr = spec.lr_at(t)
        if self._spans is not None and self._spans.at(t) is not None:
            return self._traced_step(t, lr)
        for q, holders in enumerate(self.phase.roster(t)):
            y = local_step(self.problem, holders, self.xs[q], self.vs[q], t, lr, spec.step_rule,
                           out=self._ybuf[q])
            w = topo.mixing(spec.topology, len(holders), t)
            self.xs[q], self._spare[q] = mix(w, y, out=self._spare[q]), self.xs[q]

    def _traced_step(self, t: int, lr: float) -> None:
        """:meth:`step` with each run's vectorised step and mix timed, recorded on every
        node of the round (the simulator computes them together: a node's span is its
        run's; under the virtual clock the oracle records the nodes' logical time instead)."""
        from ...trace.spans import ROUND, STEP, SUM

        spec, s, clock = self.spec, self._spans, self._spans.clock
        for q, holders in enumerate(self.phase.roster(t)):
            a = clock()
            y = local_step(self.problem, holders, self.xs[q], self.vs[q], t, lr, spec.step_rule,
                           out=self._ybuf[q])
            b = clock()
            w = topo.mixing(spec.topology, len(holders), t)
            self.xs[q], self._spare[q] = mix(w, y, out=self._spare[q]), self.xs[q]
            c = clock()
            if self.oracle is None:
                for m, node in enumerate(holders.tolist()):
                    s.add(ROUND, a, c, node=node, token=m)
                    s.add(STEP, a, b, node=node, token=m)
                    s.add(SUM, b, c, node=node, token=m)

    def trace(self, tracer) -> None:
        """Record the simulated nodes' rounds in ``tracer`` (one process per node in the
        file): under the virtual clock their logical time (the oracle's), else the real
        time of the vectorised step and mix of their run."""
        tracer.rank, tracer.pid_from = 0, "node"
        self._spans = tracer.spans
        # (every active node's spans: a round's holders and, under the clock, the next's)
        tokens = max(sum(len(h) for h in phase.roster(phase.start)) for phase in self.spec.phases())
        tracer.spans.reserve(4 * 2 * tokens)
        if self.oracle is not None:
            tracer.clock = "virtual"
            self.oracle.spans = tracer.spans

    def placing_phase(self, phase, start: int, restore=None):
        """The phase the tokens are placed by at round ``start``: ``phase`` (elastic mode
        over the nodes still living: :class:`~mpi_teleport.elastic.simulated.SimulatedElasticBackend`)."""
        return phase

    # -- the round boundary: nothing is lost here (elastic mode's failure plan: SimulatedElasticBackend)
    def keep(self, r: int) -> None:
        """Nothing to keep: no node is lost."""

    def enter(self, r: int) -> None:
        """(Every boundary is kept here: ``agree_every`` is 1.)"""

    def settle(self, r: int, ok: bool = True, later: bool = False) -> bool:
        """Nothing to agree on: every node lives."""
        return ok

    def recover(self, r: int) -> None:
        """Never called: without elastic mode no node is lost."""
        raise RuntimeError("the simulator loses nodes only in elastic mode (--fail)")

    def join(self, r: int) -> None:
        """Never called: the simulator's spares take nodes over inside a recovery."""
        raise RuntimeError("the simulator's spares take nodes over in recover(); none joins")

    def set_handover(self, export, take) -> None:
        """Nothing to hand over: every node is in this process."""

    # -- what the engine reads -------------------------------------------------------------
    def tokens(self, run: int) -> np.ndarray:
        return self.xs[run]

    def evaluate(self, problem, x: np.ndarray, split: str = "test"):
        """``problem.evaluate(x)`` ("test") or ``problem.validate(x)`` ("validation")."""
        return problem.evaluate(x) if split == "test" else problem.validate(x)

    def training_metrics(self, problem, t: int) -> dict:
        """Round t's batch values (every node's, computed here) averaged over its holders."""
        return round_means([problem.training_metrics(t)], np.concatenate(self.phase.roster(t)))

    def virtual_time_s(self, r: int) -> float | None:
        if self.oracle is None:
            return None
        self.oracle.advance_to(r)
        return self.oracle.time_s()

    def clocks(self, r: int) -> list[float] | None:
        """Every node's logical clock after round r (for a checkpoint)."""
        if self.oracle is None:
            return None
        self.oracle.advance_to(r)
        return self.oracle.clock.tolist()

    def restore_clock(self, clocks) -> None:
        """Nothing to restore: the oracle replays the clocks from round 0."""

    def interrupt_on(self, asked) -> None:
        """Nothing waits here: a signal is seen after the round."""

    # -- collectives (one process: nothing to agree on) ------------------------------------
    def share(self, fn):
        return fn()

    def agree(self, flag: int) -> int:
        return flag

    def barrier(self) -> None:
        pass

    @property
    def checks_every_round(self) -> bool:
        """A signal is looked at every round (it costs nothing here)."""
        return True

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self, directory: Path) -> list[str]:
        """Write the token matrices (layout 'matrix'); returns the array names."""
        arrays = {"x": self.xs[0]}
        if self.vs[0] is not None:
            arrays["v"] = self.vs[0]
        save_matrix(directory, arrays)
        return sorted(arrays)

    @property
    def dim(self) -> int:
        return int(self.xs[0].shape[1])

    def close(self) -> None:
        pass
