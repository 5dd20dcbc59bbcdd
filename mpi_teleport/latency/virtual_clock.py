"""The virtual clocks of all n nodes, computed centrally (the simulator's oracle).

Each MPI rank keeps a logical clock under the latency layer: it advances by the compute
time of each local step and, on every receive, to max(own clock, sender's clock +
delta(i, j) + bytes / bandwidth). This module computes the same clocks for every node
at once from the round's messages (:func:`mpi_teleport.core.plan.round_messages`, the same
plan the ranks execute) with the same float operations, so the simulator's
``virtual_time_s`` equals the ranks' bit for bit when the compute time is modelled
(``--compute-time``). Message sizes are those of the tokens' real dtype.
"""
from __future__ import annotations

import numpy as np

from ..core import plan
from ..core.schedule import Phase


class Oracle:
    """Replays the message pattern of a run (its phases in order) on n logical clocks."""

    def __init__(self, model, n: int, nbytes: int, compute_us: float, topology,
                 variant: str, momentum: bool, phases: list[Phase]):
        self.model, self.n, self.nbytes = model, n, int(nbytes)
        self.compute = float(compute_us)
        self.topology, self.variant, self.momentum = topology, variant, momentum
        self.phases = phases
        self.clock = np.zeros(n)
        self.done = 0  # rounds charged so far (global round numbers)

    def time_s(self) -> float:
        return float(self.clock.max()) / 1e6

    def advance_to(self, r: int) -> None:
        """Charge every round t < r not charged yet."""
        for phase in self.phases:
            for t in range(max(self.done, phase.start), min(r, phase.stop)):
                self._round(phase, t)
                self.done = t + 1

    def _round(self, phase: Phase, t: int) -> None:
        now = phase.roster(t)
        prev = None
        if self.variant == "simple":
            prev = now if phase.is_placement_round(t) else phase.roster(t - 1)
        nxt = phase.roster(t + 1) if self.variant == "overlap" else now
        msgs = plan.round_messages(self.topology, self.variant, prev, now, nxt, t, self.momentum)
        if msgs.fetch is not None:  # Alg. 1 line 8 (model and momentum travel together)
            senders, receivers = msgs.fetch
            self._receive(receivers, senders, self.clock[senders])
        self.clock[msgs.compute] += self.compute
        stamps = self.clock.copy()  # every message of the phase leaves with these stamps
        for senders, receivers in msgs.groups:
            self._receive(receivers, senders, stamps[senders])
        for senders, receivers in msgs.complete:
            for a in range(0, len(receivers), 1024):
                dst = receivers[a:a + 1024]
                arrival = stamps[senders][None, :] + self.model.delay_us(
                    senders[None, :], dst[:, None], self.nbytes)
                self.clock[dst] = np.maximum(self.clock[dst], arrival.max(axis=1))
        if msgs.momentum is not None:  # Alg. 3: momentum rides m -> m, posted with y
            senders, receivers = msgs.momentum
            self._receive(receivers, senders, stamps[senders])

    def _receive(self, dst: np.ndarray, src: np.ndarray, sent_at: np.ndarray) -> None:
        """clock[dst] = max(clock[dst], sent_at + delay(src, dst)); dst distinct."""
        arrival = sent_at + self.model.delay_us(src, dst, self.nbytes)
        self.clock[dst] = np.maximum(self.clock[dst], arrival)


def for_run(spec, latency, dim: int, itemsize: int) -> Oracle:
    """The oracle of one run (:class:`mpi_teleport.core.spec.RunSpec`) under the latency
    settings (:class:`mpi_teleport.latency.model.LatencySettings`), for tokens of ``dim``
    elements of ``itemsize`` bytes, with its modelled compute time
    (``LatencySettings.compute_us``: 0 when not modelled, the simulator does not measure
    its steps)."""
    from . import parse_spec

    return Oracle(parse_spec(latency.spec, spec.nodes), spec.nodes, dim * itemsize,
                  latency.compute_us, spec.topology, spec.moves, spec.momentum > 0,
                  spec.phases())
