"""Elastic mode in the simulator: the failure plan (``--fail NODE@ROUND``) the MPI runtime
would detect, lost and replaced by the same rules (:mod:`mpi_teleport.elastic.survivors`),
so the simulator's records equal an elastic MPI run's that lost the same nodes.
"""
from __future__ import annotations

from ..errors import TooFewSurvivors
from ..runtime.backends.local import LocalBackend
from . import survivors


class SimulatedElasticBackend(LocalBackend):
    """The simulator's back end told of failures: at every round boundary the engine asks
    whether the plan loses nodes there (:meth:`settle`) and, when it does, rolls back to
    the round's start (:meth:`recover`): the waiting spares take over the lowest dead
    nodes, the lost tokens are restored, the run goes on over the survivors.

    ``losses``: what was lost so far, ``replacements``: the nodes a spare took over (the
    records say so)."""

    elastic = True

    def __init__(self, problem, spec, oracle=None, failures=(), spares=0):
        super().__init__(problem, spec, oracle)
        self.failures = tuple(failures)
        self.losses: list = []
        self.replacements: list = []
        self.spares = int(spares)
        self.waiting = list(range(spec.nodes, spec.nodes + self.spares))  # the spares' ids
        self.became: dict[int, int] = {}  # spare -> the node it took over
        self.living = survivors.Living.everyone(spec.nodes)  # (begin() reads a resume's)
        self.kept, self.kept_round = None, None

    def placing_phase(self, phase, start: int, restore=None):
        """The phase over the nodes still living at ``start`` (a resumed run's checkpoint
        names the losses)."""
        self.living = survivors.Living.from_manifest(self.spec.nodes, restore and restore[1])
        self.losses, self.replacements = self.living.losses, self.living.replaced
        if len(self.living.nodes) < self.spec.nodes:
            return survivors.living_phase(self.spec, self.living.nodes, start, True)
        return phase

    # (the engine calls these at every round boundary)
    def keep(self, r: int) -> None:
        """The tokens at round r's start (a loss at r restores from them); a spare the plan
        kills at r leaves the waiting spares first."""
        if self.kept is not None and self.kept_round == r:
            return
        dead = {f.node for f in self.failures if f.round == r and f.node >= self.spec.nodes}
        self.waiting = [s for s in self.waiting if s not in dead]
        self.kept_round = r
        self.kept = (self.xs[0].copy(), None if self.vs[0] is None else self.vs[0].copy())

    def settle(self, r: int, ok: bool = True, later: bool = False) -> bool:
        """Whether every node the plan loses at round r is already lost."""
        return ok and not self.dying(r)

    def dying(self, r: int) -> list[int]:
        """The nodes the plan loses at round r that still live."""
        living = set(self.living.nodes)
        # (a resume re-admitted them, or its checkpoint was written after the loss)
        done = {(x["node"], x["round"]) for x in self.losses + self.replacements}
        # (a spare's id names its process: once it took node i over, node i dies)
        nodes = [self.became.get(f.node, f.node) for f in self.failures if f.round == r]
        return sorted(i for i in nodes if i in living and i < self.spec.nodes
                      and (i, r) not in done)

    def recover(self, r: int) -> None:
        """The plan's nodes of round r die: back to round r's start, the waiting spares
        take over the lowest of them, restore their tokens, continue over the survivors
        (TooFewSurvivors when fewer than k)."""
        dead = self.dying(r)
        replaced, lost = survivors.assign(dead, self.waiting)
        self.waiting = [s for s in self.waiting if s not in set(replaced.values())]
        self.became.update({s: i for i, s in replaced.items()})
        entry = survivors.entry_roster(self.phase, r, self.spec.moves)
        x, v = self.kept
        self.living = self.living.without(lost)
        try:
            x, v, _ = survivors.restore(self.spec, x, v, entry, dead, replaced)
        except TooFewSurvivors:
            raise TooFewSurvivors(r, len(self.living.nodes), self.spec.k,
                                  all_lost=True) from None
        self.living.losses += survivors.loss_records(self.spec, r, entry, lost)
        self.living.replaced += survivors.replacement_records(self.spec, r, entry, replaced)
        self.losses, self.replacements = self.living.losses, self.living.replaced
        self.xs, self.vs = [x], [v]
        self.reset_buffers()
        survivors.check_enough(self.spec, r, self.living.nodes)
        self.phase = survivors.living_phase(self.spec, self.living.nodes, r, True)
