"""Every node in this process: the simulator's back end, vectorised over tokens.

Teleportation keeps only the k token rows of each run, O(k d) memory, so n = 10^6 nodes
costs no more per round than n = 100. Algorithms 1 and 3 compute the same numbers (they
differ in when vectors travel, not in what is summed), so one update serves both; the
variant matters only to the virtual clock (:class:`mpi_teleport.virtual_clock.Oracle`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import topology as topo
from ..algorithms import local_step, mix
from ..checkpoint import LAYOUT_MATRIX, load_matrix, save_matrix


class LocalBackend:
    """All tokens of every run as (k, d) matrices in this process (an
    :class:`~mpi_teleport.interfaces.Backend`)."""

    root = True
    rank = 0
    name = "sim"
    layout = LAYOUT_MATRIX

    def __init__(self, problem, spec, oracle=None):
        self.problem, self.spec, self.oracle = problem, spec, oracle
        self.xs: list[np.ndarray] = []
        self.vs: list[np.ndarray | None] = []
        self._spare: list[np.ndarray] = []
        self._ybuf: list[np.ndarray] = []

    # -- placing tokens ----------------------------------------------------------------
    def begin(self, phase, start: int, x0: np.ndarray, restore=None) -> None:
        """The phase's tokens at round ``start``: x0 for every token, or the checkpoint's
        matrices (``restore`` = (directory, manifest))."""
        self.phase = phase
        ks = [len(h) for h in phase.roster(start)]
        momentum = self.spec.momentum > 0
        if restore is not None:
            arrays = load_matrix(*restore)
            self.xs = [arrays["x"].astype(x0.dtype, copy=True).reshape(ks[0], -1)]
            self.vs = [arrays["v"].astype(x0.dtype, copy=True).reshape(ks[0], -1)
                       if momentum else None]
        else:
            self.xs = [np.tile(x0, (k, 1)) for k in ks]
            self.vs = [np.zeros_like(x) if momentum else None for x in self.xs]
        self._spare = [np.empty_like(x) for x in self.xs]  # no allocation per round
        self._ybuf = [np.empty_like(x) for x in self.xs]

    # -- one round -----------------------------------------------------------------------
    def step(self, t: int) -> None:
        spec = self.spec
        lr = spec.lr_at(t)
        for q, holders in enumerate(self.phase.roster(t)):
            y = local_step(self.problem, holders, self.xs[q], self.vs[q], t, lr, spec.momentum,
                           out=self._ybuf[q])
            w = topo.mixing(spec.topology, len(holders), t)
            self.xs[q], self._spare[q] = mix(w, y, out=self._spare[q]), self.xs[q]

    # -- what the engine reads -------------------------------------------------------------
    def tokens(self, run: int) -> np.ndarray:
        return self.xs[run]

    def evaluate(self, problem, x: np.ndarray, split: str = "test"):
        """``problem.evaluate(x)`` ("test") or ``problem.validate(x)`` ("validation")."""
        return problem.evaluate(x) if split == "test" else problem.validate(x)

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
