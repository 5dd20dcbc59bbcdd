"""Elastic mode over MPI: the round executor with a round-start copy, an agreement at
every round boundary, and recovery from lost ranks (mpi_teleport/runtime/elastic.py,
mpi_teleport/DESIGN.md §11).

The engine's one loop (:func:`mpi_teleport.runtime.engine.execute`) calls, for every round
boundary r, the round-boundary members every back end has (a plain one does nothing there):
:meth:`ElasticBackend.keep` (this rank keeps the token it holds at round r's start), then
round r's record and checkpoint and round r itself, then :meth:`ElasticBackend.settle`
(every survivor agrees that nothing failed). When something did, :meth:`recover` shrinks
the communicator to the survivors, rolls round r back to the kept tokens, restores the
lost tokens (the mean of the surviving ones, momentum zero), places every token with its
holder over the living set and the engine redoes boundary r, so the numbers do not depend
on which survivors' exchanges of round r had completed: they equal the simulator told
of the same failures (``--fail NODE@ROUND``).

Only the round executor (:mod:`mpi_teleport.core.algorithms.teleport`, per-round messages)
runs here, never the compiled rounds: persistent channels are bound to a communicator
that a failure replaces (benchmarks/bench_elastic.py measures the price).
"""
from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from .. import elastic
from ...checkpoint import save_token
from ...core.interfaces import KIND_SPARE
from .mpi import MpiBackend

if TYPE_CHECKING:
    from ...core.interfaces import FaultTolerantTransport

TEST_DIE = "MPI_TELEPORT_TEST_DIE"  # NODE@ROUND[:save|:stop],...: tests kill a rank there
TEST_DIE_ONCE = "MPI_TELEPORT_TEST_DIE_ONCE"  # a directory: each entry above fires once


def _test_hook(node: int, r: int, where: str) -> None:
    """Tests only: SIGKILL (``:stop``: SIGSTOP) this process at round r's start ("start")
    or inside round r's checkpoint ("save") when $MPI_TELEPORT_TEST_DIE names it."""
    for item in filter(None, os.environ.get(TEST_DIE, "").split(",")):
        spot, _, how = item.partition(":")
        who, _, when = spot.partition("@")
        at = "save" if how == "save" else "start"
        if int(who) == node and int(when) == r and at == where:
            once = os.environ.get(TEST_DIE_ONCE)
            if once:  # each entry kills one process (rounds redone after a rollback: not again)
                mark = os.path.join(once, f"died-{item.replace(':', '-')}")
                if os.path.exists(mark):
                    continue
                open(mark, "w").close()
            os.kill(os.getpid(), signal.SIGSTOP if how == "stop" else signal.SIGKILL)


class ElasticBackend(MpiBackend):
    """This rank's node in an elastic run (an :class:`~mpi_teleport.core.interfaces.Backend`
    whose round-boundary members act); ``transport`` is a
    :class:`~mpi_teleport.core.interfaces.FaultTolerantTransport` (MPI's
    :class:`~mpi_teleport.runtime.transport.ElasticTransport`)."""

    elastic = True
    transport: FaultTolerantTransport

    def __init__(self, problem, spec, transport, token_device=None, agree_every: int = 1):
        if spec.algorithm not in ("teleportation", "dsgd"):
            raise ValueError("elastic mode runs Teleportation or DSGD")
        super().__init__(problem, spec, transport, token_device, compiled=False)
        self.living = elastic.Living.everyone(spec.nodes)
        self.losses, self.replacements = self.living.losses, self.living.replaced
        self.spares = transport.spares
        self._kept: tuple | None = None  # (m, entry, x, v) of the last kept round's start
        self._orphans: dict = {}  # tokens the root writes in a too-few checkpoint
        self._kept_living = self.living
        self._kept_round: int | None = None
        self._gone: dict = {}  # nodes dead since round r's start -> the spare taking over (or None)
        # Hot spares: what the engine hands a spare that takes a node over (the root's
        # export) and how the spare takes it (set_handover, by the engine's loop)
        self._handover: tuple[Callable[[], Any], Callable[[Any], None]] = (
            lambda: None, lambda state: None)
        self._joining = False
        # --agree-every A: the survivors agree (and keep the tokens) every A rounds, not
        # every round; a loss seen at an agreement rolls back to the last one (DESIGN §11)
        self.agree_every = max(1, int(agree_every))
        self._joined_at: int | None = None  # (tests' hooks: a spare is not killed again at its first round)

    @property
    def root(self) -> bool:
        """The lowest surviving node writes the files."""
        return self.transport.index == 0

    @root.setter
    def root(self, value) -> None:  # (MpiBackend.__init__ sets it; the transport decides)
        pass

    def begin(self, phase, start: int, x0: np.ndarray, restore=None) -> None:
        self.living = elastic.Living.from_manifest(self.spec.nodes, restore and restore[1])
        self.losses, self.replacements = self.living.losses, self.living.replaced
        if len(self.living.nodes) < self.spec.nodes:
            phase = elastic.living_phase(self.spec, self.living.nodes, start, True)
        super().begin(phase, start, x0, restore)

    # -- the round boundary --------------------------------------------------------------
    def keep(self, r: int) -> None:
        """The token this rank holds at round r's start, where every token sits and who
        lives: what every recovery at round r starts from (kept once per round, so a
        second loss at r, even during the first recovery, restores from the same state)."""
        if self._kept_round == r:
            return
        _test_hook(self.rank, r, "start")
        s, (_, m) = self.state, self.held
        self._kept = (m, self.holding[0].copy(), s.x.copy() if m >= 0 else None,
                      s.v.copy() if m >= 0 and s.v is not None else None)
        self._kept_living, self._kept_round = self.living, r
        self._gone = {}

    def enter(self, r: int) -> None:
        """Round r's start between agreements: nothing kept (tests' hook only)."""
        _test_hook(self.rank, r, "start")

    def join(self, r: int) -> None:
        """A spare that took a node over at round r: it holds nothing yet; :meth:`recover`,
        which it enters beside the survivors, hands it round r's start."""
        self._joining, self._kept_round, self._joined_at = True, r, r
        self._gone = dict(self.transport.replaced)

    def settle(self, r: int, ok: bool = True) -> bool:
        """Every survivor agrees that nothing failed (MPI_Comm_agree)."""
        return self.transport.settle(ok)

    def set_handover(self, export, take) -> None:
        """(A spare taking a node over gets ``export()`` of the root; it calls ``take``.)"""
        self._handover = (export, take)

    def recover(self, r: int) -> None:
        """The survivors go on from round r's start without the lost nodes."""
        tr, spec = self.transport, self.spec
        if not self._joining:
            for node in tr.shrink(r):  # (with spares: {node: spare} in tr.replaced)
                self._gone[node] = tr.replaced.get(node)
        if any(s is not None for s in self._gone.values()):
            self._hand_over(r)  # (collective: a spare took a node over since r's start)
        m, entry, x, v = cast(tuple, self._kept)  # (kept at round r's start, or handed over)
        # every node dead since round r's start (all of them restored from that state): the
        # ones a spare took over stay in the run
        dead = sorted(self._gone)
        replaced = {i: s for i, s in self._gone.items() if s is not None}
        gone = [i for i in dead if i not in replaced]
        self.living = self._kept_living.without(gone)
        self.living.losses += elastic.loss_records(spec, r, entry, gone)
        self.living.replaced += elastic.replacement_records(spec, r, entry, replaced)
        self.losses, self.replacements = self.living.losses, self.living.replaced
        lost = elastic.lost_tokens(entry, dead)
        keep = [j for j in range(len(entry)) if j not in set(lost)]
        refill = lost if spec.algorithm != "dsgd" else elastic.lost_tokens(entry, replaced)
        mean = None
        if refill and not keep:  # nothing to restore from
            raise elastic.TooFewSurvivors(r, len(self.living.nodes), spec.k, all_lost=True)
        if refill:  # the mean of the surviving tokens, everywhere
            rows = tr.gather_rows(x if m in keep else None, entry[keep], len(self.state.x),
                                  self.state.x.dtype)
            mean = (elastic.mean_of(cast(np.ndarray, rows)) if self.root  # (the root: all rows)
                    else np.empty_like(self.state.x))
            tr.bcast_array(mean)
        # token j of the run over the survivors comes from old token sources[j] (None:
        # restored): Teleportation keeps its k tokens, DSGD its surviving replicas and
        # the replaced nodes' (restored)
        if spec.algorithm == "dsgd":
            sources = [j if j in keep else None for j in range(len(entry))
                       if j in keep or j in refill]
        else:
            sources = [None if j in lost else j for j in range(len(entry))]
        try:
            elastic.check_enough(spec, r, self.living.nodes)
        except elastic.TooFewSurvivors:
            self._hold_for_checkpoint(m, x, v, sources, mean)
            raise
        new_phase = elastic.living_phase(spec, self.living.nodes, r, True)
        self._place(r, new_phase, entry, sources, m, x, v, mean)
        if not tr.settle(True):  # every survivor's restore and placement went through
            from ...errors import RankLost

            raise RankLost("a rank died during the recovery: it starts again")

    def _hand_over(self, r: int) -> None:
        """The root gives the spares that took nodes over what the survivors know: round r's
        start (where the tokens sat, who lived), the nodes gone since, and the engine's
        part (the records); a spare takes it, the others pass."""
        state = None
        if self.root:
            living = self._kept_living
            kept = cast(tuple, self._kept)  # (kept at round r's start)
            state = {"entry": kept[1], "nodes": living.nodes, "losses": living.losses,
                     "replaced": living.replaced, "gone": self._gone,
                     "engine": self._handover[0]()}
        state = self.transport.bcast(state)
        if not self._joining:
            return
        self._kept = (-1, np.asarray(state["entry"]), None, None)
        self._kept_living = elastic.Living(tuple(state["nodes"]), list(state["losses"]),
                                           list(state["replaced"]))
        self._gone = dict(state["gone"])
        self._handover[1](state["engine"])
        self._joining = False

    def _place(self, r, new_phase, entry, sources, m, x, v, mean) -> None:
        """Every token to its holder at round r over the living set: from its holder at
        round r's start (its kept copy), or the restored mean (zero momentum)."""
        tr, s = self.transport, self.state
        target = np.asarray(new_phase.roster(r)[0])
        tag_x, tag_v = tr.tag(r, KIND_SPARE), tr.tag(r + 1, KIND_SPARE)
        sends, recvs = [], []
        mine = None
        for j, src in enumerate(sources):
            dest = int(target[j])
            if src is None:
                if dest == self.rank:
                    mine = j
                    s.x[...] = mean
                    if s.v is not None:
                        s.v[...] = 0
                continue
            holder = int(entry[src])
            if holder == self.rank and dest == self.rank:
                mine = j
                s.x[...] = x
                if s.v is not None:
                    s.v[...] = v
            elif holder == self.rank:
                sends.append((dest, tag_x, x))
                if v is not None:
                    sends.append((dest, tag_v, v))
            elif dest == self.rank:
                mine = j
                recvs.append((holder, tag_x, s.x))
                if s.v is not None:
                    recvs.append((holder, tag_v, s.v))
        # (a further loss during this exchange is seen at the boundary's agreement; the
        # next recovery starts again from round r's kept state)
        tr.exchange(sends, recvs)
        self.phase, self._block, self._last = new_phase, None, -1
        self._sizes = (len(target),)
        self._holding = [target]
        self._held = (0, mine) if mine is not None else (-1, -1)
        self._orphans = {}

    def _hold_for_checkpoint(self, m, x, v, sources, mean) -> None:
        """Too few survivors: the checkpoint of round r's start (with the restored tokens)
        is written by the surviving holders and, for the restored tokens, the root."""
        self._block, self._last = None, -1  # (``held`` reads self._held from now on)
        self._held = (0, m) if m >= 0 and m in sources else (-1, -1)
        if m >= 0:
            self.state.x[...] = x
            if v is not None:  # (then the state has v)
                cast(np.ndarray, self.state.v)[...] = v
        self._orphans = {j: mean for j, src in enumerate(sources) if src is None} if self.root else {}

    # -- what the engine reads -------------------------------------------------------------
    def _evaluation_place(self) -> int:
        """Shared evaluation is split by place among the survivors, not by rank."""
        return self.transport.index

    def save(self, directory):
        if self._round_of(directory) != self._joined_at:
            _test_hook(self.rank, self._round_of(directory), "save")
        names = super().save(directory)
        for j, mean in self._orphans.items():
            arrays = {"x": mean}
            if self.state.v is not None:
                arrays["v"] = np.zeros_like(mean)
            save_token(directory, j, arrays)
        return names

    @staticmethod
    def _round_of(directory) -> int:
        try:
            return int(str(directory).rsplit("round-", 1)[1])
        except (IndexError, ValueError):
            return -1

    @property
    def token_count(self) -> int:
        return elastic.token_count(self.spec, self.living.nodes)

    def close(self) -> None:
        self.transport.close()

