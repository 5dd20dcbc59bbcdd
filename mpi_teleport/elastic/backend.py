"""Elastic mode over MPI: the compiled rounds between agreements, a copy of the held
token at every agreed boundary, and recovery from lost ranks (the rules: :mod:`mpi_teleport.elastic.survivors`;
mpi_teleport/DESIGN.md §11).

The engine's one loop (:func:`mpi_teleport.runtime.engine.execute`) calls, for every agreed
round boundary r, the round-boundary members every back end has (a plain one does nothing
there): :meth:`ElasticBackend.keep` (this rank keeps the token it holds at round r's
start), then round r's record and checkpoint and the rounds up to the next agreed boundary,
then :meth:`ElasticBackend.settle` (every survivor agrees that nothing failed). When
something did, :meth:`recover` shrinks the communicator to the survivors, rolls back to
the last boundary all of whose earlier rounds were agreed on, restores the lost tokens
(the mean of the surviving ones, momentum zero), places every token with its holder over
the living set and the engine redoes the rounds from there, so the numbers do not depend
on which survivors' exchanges had completed: they equal the simulator told of the same
failures at that boundary (``--fail NODE@ROUND``).

The rounds are the plain mode's compiled rounds (persistent channels,
:mod:`~mpi_teleport.runtime.backends.compiled`), compiled again over the survivors'
communicator after a recovery. Between a record, a checkpoint or the run's end the
agreement does not hold the rounds up: it is started (MPIX_Comm_iagree) at its boundary,
progresses inside the next rounds' exchanges and is completed at a later agreed boundary
(the next one; with intervals shorter than AGREE_ROUNDS rounds, the one that gives it
that many, :func:`under_way`), so the boundaries kept are the newest and those back to
the last one agreed on, each with its copy, and a loss is redone from that last agreed
boundary: at most ``under_way + 1`` intervals of rounds. At a boundary with a collective
(a record, a checkpoint, the run's end) every agreement is completed first, so no record
or checkpoint ever holds rounds that were not agreed on.

``--agree-every 0`` chooses the interval A from what this run measures (:func:`interval`):
the first two agreements are waited for and timed, with the copy and the rounds between
them; A is the smallest power of two whose rounds take 1 / AUTO_SHARE times an agreement
and a copy, but no longer than REDO_S, agreed by every rank (the largest of their
choices, carried in the agreement's own word).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from ..checkpoint import save_token
from ..core.interfaces import KIND_SPARE
from ..errors import TooFewSurvivors
from ..runtime.backends.mpi import MpiBackend
from . import survivors
from .test_hook import TEST_DIE, die_here

if TYPE_CHECKING:
    from ..core.interfaces import FaultTolerantTransport

# --agree-every 0: the interval chosen from the run's own measurements (see interval())
AUTO_START = 8  # rounds between the two timed agreements that choose it
AUTO_SHARE = 0.01  # an agreement and a copy cost at most this share of an interval's rounds
REDO_S = 0.1  # ... unless an interval would then last longer than this (a loss redoes <= 2)
AUTO_MOST = 1 << 14  # (the interval's exponent travels in the agreement's 31-bit word)
_EXPONENTS = AUTO_MOST.bit_length()
AGREE_ROUNDS = 3  # the rounds an agreement under way gets before it is waited for


def interval(agree_s: float, keep_s: float, round_s: float) -> int:
    """The rounds between agreements for an agreement of ``agree_s`` seconds, a copy of the
    held token of ``keep_s`` and rounds of ``round_s``: the smallest power of two whose
    rounds take at least (agree_s + keep_s) / AUTO_SHARE, at most REDO_S (at least 1)."""
    round_s = max(round_s, 1e-9)
    cost = max(1, math.ceil((agree_s + keep_s) / (AUTO_SHARE * round_s)))
    most = max(1, min(AUTO_MOST, int(REDO_S / round_s)))
    a = 1 << (cost - 1).bit_length()
    while a > most:
        a >>= 1
    return a


def under_way(every: int) -> int:
    """How many agreements may be under way at once with an interval of ``every`` rounds:
    each gets at least AGREE_ROUNDS rounds to complete in (so 1 from AGREE_ROUNDS rounds
    on). A loss redoes at most this many intervals and one more; each costs a copy."""
    return max(1, -(-AGREE_ROUNDS // max(1, every)))


def _exponent_bits(a: int) -> int:
    """A power of two 2**e as bits e.. set: their AND over the ranks is the largest e's."""
    e = max(0, a.bit_length() - 1)
    return sum(1 << j for j in range(e, _EXPONENTS))


def _largest(bits: int) -> int:
    """The interval whose bits (:func:`_exponent_bits`) are the AND of every rank's."""
    return 1 << ((bits & -bits).bit_length() - 1) if bits else 1


@dataclass
class Kept:
    """What a recovery at round ``round`` starts from: the token this rank held (``m``,
    -1: none; ``x``, ``v`` its copy), where every token sat (``entry``), who lived."""

    round: int
    m: int
    entry: np.ndarray
    x: np.ndarray | None
    v: np.ndarray | None
    living: survivors.Living

    def as_tuple(self) -> tuple:
        return self.m, self.entry, self.x, self.v


class ElasticBackend(MpiBackend):
    """This rank's node in an elastic run (an :class:`~mpi_teleport.core.interfaces.Backend`
    whose round-boundary members act); ``transport`` is a
    :class:`~mpi_teleport.core.interfaces.FaultTolerantTransport` (MPI's
    :class:`~mpi_teleport.elastic.transport.ElasticTransport`)."""

    elastic = True
    transport: FaultTolerantTransport

    def __init__(self, problem, spec, transport, token_device=None,
                 agree_every: int | None = None):
        if spec.algorithm not in ("teleportation", "dsgd"):
            raise ValueError("elastic mode runs Teleportation or DSGD")
        super().__init__(problem, spec, transport, token_device)  # (compiled where it can)
        self.living = survivors.Living.everyone(spec.nodes)
        self.losses, self.replacements = self.living.losses, self.living.replaced
        self.spares = transport.spares
        # The boundaries kept (Kept), oldest first: the one a recovery goes back to (the
        # newest whose earlier rounds every survivor agreed on), then one per agreement
        # under way (``_pending``, oldest first: each, completed, confirms the next Kept);
        # the copies of the held token in buffers made once, reused
        self._chain: list[Kept] = []
        self._copies: list = []  # [(x, v)] buffers of the Kept copies
        self._pending: list = []  # the agreements under way (transport.start_agreement's)
        self.rollback_to: int | None = None  # (after a failed settle: the round to go back to)
        self._orphans: dict = {}  # tokens the root writes in a too-few checkpoint
        self._gone: dict = {}  # nodes dead since the target's round -> the spare taking over (or None)
        # Hot spares: what the engine hands a spare that takes a node over (the root's
        # export) and how the spare takes it (set_handover, by the engine's loop)
        self._handover: tuple[Callable[[], Any], Callable[[Any], None]] = (
            lambda: None, lambda state: None)
        self._joining = False
        # --agree-every A: the survivors agree (and keep the tokens) every A rounds, not
        # every round; a loss seen at an agreement rolls back to the last one agreed
        # (DESIGN §11). 0 (the default): A chosen from this run's measurements (interval())
        every = int(agree_every or 0)  # (None: the default, 0)
        self._auto = every == 0
        self.agree_every = AUTO_START if self._auto else max(1, every)
        self._timing: dict = {}  # (auto: what the first agreements measured)
        self._next_every: int | None = None  # (auto: the interval from the next boundary on)
        self._depth = under_way(self.agree_every)
        self._joined_at: int | None = None  # (tests' hooks: a spare is not killed again at its first round)
        self._test_dies = bool(os.environ.get(TEST_DIE))  # (read once: enter() runs every round)

    @property
    def root(self) -> bool:
        """The lowest surviving node writes the files."""
        return self.transport.index == 0

    @root.setter
    def root(self, value) -> None:  # (MpiBackend.__init__ sets it; the transport decides)
        pass

    def begin(self, phase, start: int, x0: np.ndarray, restore=None) -> None:
        self.living = survivors.Living.from_manifest(self.spec.nodes, restore and restore[1])
        self.losses, self.replacements = self.living.losses, self.living.replaced
        if len(self.living.nodes) < self.spec.nodes:
            phase = survivors.living_phase(self.spec, self.living.nodes, start, True)
        super().begin(phase, start, x0, restore)

    # -- the round boundary --------------------------------------------------------------
    def keep(self, r: int) -> None:
        """The token this rank holds at round r's start, where every token sits and who
        lives: what a recovery at round r starts from (kept once per round, so a second
        loss at r, even during the first recovery, restores from the same state). The
        copy goes to a buffer that no Kept still needed holds."""
        if self._chain and self._chain[0].round == r:
            del self._chain[1:]
            return
        die_here(self.rank, r, "start", self._finish_pending)
        if self._next_every is not None:  # (auto: the agreed interval, from this boundary on)
            self.agree_every, self._next_every = self._next_every, None
            self._depth = under_way(self.agree_every)
        began = time.perf_counter()
        s, (_, m) = self.state, self.held
        if not self._pending:  # (every round before r agreed on: r becomes the target)
            self._chain, self._gone = [], {}
        used = {id(k.x) for k in self._chain}
        x, v = next((c for c in self._copies if id(c[0]) not in used), (None, None))
        if x is None:
            x, v = np.empty_like(s.x), None if s.v is None else np.empty_like(s.v)
            self._copies.append((x, v))
        if m >= 0:
            np.copyto(x, s.x)
            if v is not None:
                np.copyto(v, cast(np.ndarray, s.v))
        self._chain.append(Kept(r, m, self.holding[0].copy(), x, v, self.living))
        self._timing["keep_s"] = time.perf_counter() - began
        self._timing["kept_at"] = (r, time.perf_counter())

    def enter(self, r: int) -> None:
        """Round r's start between agreements: nothing kept (tests' hook only)."""
        if self._test_dies:
            die_here(self.rank, r, "start", self._finish_pending)

    def join(self, r: int) -> None:
        """A spare that took a node over at round r: it holds nothing yet; :meth:`recover`,
        which it enters beside the survivors, hands it round r's start."""
        self._joining, self._joined_at = True, r
        self._chain = [Kept(r, -1, np.zeros(0, dtype=np.int64), None, None, self.living)]
        self._gone = dict(self.transport.replaced)

    def settle(self, r: int, ok: bool = True, later: bool = False) -> bool:
        """Every survivor agrees that nothing failed up to round r's end (MPI_Comm_agree):
        first the agreements under way beyond the pipeline's depth (all of them without
        ``later``), oldest first; then these rounds' own, waited for, or with ``later`` (no
        collective follows before the next agreed boundary) only started, to be completed
        at a later boundary. Which agreements complete where depends only on the
        boundaries, so every survivor sees a loss at the same one. False: a loss, and
        :attr:`rollback_to` the round a recovery goes back to."""
        tr = self.transport
        calibrating = self._auto and "agreed" not in self._timing  # (auto: waited and timed)
        overlap = later and not calibrating
        while len(self._pending) > (self._depth - 1 if overlap else 0):
            if not tr.finish_agreement(self._pending.pop(0)):
                return self._lost()
            del self._chain[0]  # (the next Kept's earlier rounds are agreed on)
            self._gone = {}
        if overlap:
            self._pending.append(tr.start_agreement(ok))
            return True
        value = _exponent_bits(self._choose()) if calibrating and "agree_s" in self._timing else 0
        began = time.perf_counter()
        if not tr.settle(ok, value):
            return self._lost()
        if calibrating:
            self._time_window(r, time.perf_counter() - began)
            if value:  # (every rank's choice in one word: the largest interval)
                self._next_every = self._timing["agreed"] = _largest(tr.agreed)
        return True

    def _lost(self) -> bool:
        """A failed agreement: back to the target; the agreements still under way (every
        survivor started the same ones) are completed, their outcome moot."""
        self.rollback_to = self._target.round
        self._finish_pending()
        return False

    def _finish_pending(self) -> None:
        """Complete every agreement under way."""
        pending, self._pending = self._pending, []
        for agreement in pending:
            self.transport.finish_agreement(agreement)

    @property
    def _target(self) -> Kept:
        """The Kept a recovery goes back to."""
        return self._chain[0]

    def _time_window(self, r: int, agree_s: float) -> None:
        """(auto) The rounds since the newest boundary and this agreement, timed."""
        t = self._timing
        kept_round, kept_at = t.get("kept_at", (r, 0.0))
        rounds = r + 1 - kept_round
        if rounds > 0 and kept_at:
            round_s = (time.perf_counter() - agree_s - kept_at) / rounds
            t["round_s"] = min(t.get("round_s", round_s), round_s)
        t["agree_s"] = min(t.get("agree_s", agree_s), agree_s)

    def _choose(self) -> int:
        """(auto) This rank's interval from what it measured (:func:`interval`)."""
        t = self._timing
        return interval(t["agree_s"], t.get("keep_s", 0.0), t.get("round_s", 0.0))

    def set_handover(self, export, take) -> None:
        """(A spare taking a node over gets ``export()`` of the root; it calls ``take``.)"""
        self._handover = (export, take)

    def recover(self, r: int) -> None:
        """The survivors go on from round r's start without the lost nodes."""
        tr, spec = self.transport, self.spec
        self._pending, self.rollback_to = [], None  # (an agreement under way failed with it)
        if not self._joining:
            for node in tr.shrink(r):  # (with spares: {node: spare} in tr.replaced)
                self._gone[node] = tr.replaced.get(node)
        if self._compiler is not None:  # (their channels were on the old communicator)
            self._compiler.forget()
        if any(s is not None for s in self._gone.values()):
            self._hand_over(r)  # (collective: a spare took a node over since r's start)
        kept = self._target  # (kept at round r's start, or handed over)
        del self._chain[1:]
        m, entry, x, v = kept.as_tuple()
        # every node dead since round r's start (all of them restored from that state): the
        # ones a spare took over stay in the run
        dead = sorted(self._gone)
        replaced = {i: s for i, s in self._gone.items() if s is not None}
        gone = [i for i in dead if i not in replaced]
        self.living = kept.living.without(gone)
        self.living.losses += survivors.loss_records(spec, r, entry, gone)
        self.living.replaced += survivors.replacement_records(spec, r, entry, replaced)
        self.losses, self.replacements = self.living.losses, self.living.replaced
        lost = survivors.lost_tokens(entry, dead)
        keep = [j for j in range(len(entry)) if j not in set(lost)]
        refill = lost if spec.algorithm != "dsgd" else survivors.lost_tokens(entry, replaced)
        mean = None
        if refill and not keep:  # nothing to restore from
            raise TooFewSurvivors(r, len(self.living.nodes), spec.k, all_lost=True)
        if refill:  # the mean of the surviving tokens, everywhere
            rows = tr.gather_rows(x if m in keep else None, entry[keep], len(self.state.x),
                                  self.state.x.dtype)
            mean = (survivors.mean_of(cast(np.ndarray, rows)) if self.root  # (the root: all rows)
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
            survivors.check_enough(spec, r, self.living.nodes)
        except TooFewSurvivors:
            self._hold_for_checkpoint(m, x, v, sources, mean)
            raise
        new_phase = survivors.living_phase(spec, self.living.nodes, r, True)
        self._place(r, new_phase, entry, sources, m, x, v, mean)
        if not tr.settle(True):  # every survivor's restore and placement went through
            from ..errors import RankLost

            raise RankLost("a rank died during the recovery: it starts again")

    def _hand_over(self, r: int) -> None:
        """The root gives the spares that took nodes over what the survivors know: round r's
        start (where the tokens sat, who lived), the nodes gone since, and the engine's
        part (the records); a spare takes it, the others pass."""
        state = None
        if self.root:
            kept = self._target  # (kept at round r's start)
            living = kept.living
            state = {"entry": kept.entry, "nodes": living.nodes, "losses": living.losses,
                     "replaced": living.replaced, "gone": self._gone,
                     "engine": self._handover[0](),
                     "agree_every": (self.agree_every, self._next_every, self._timing)}
        state = self.transport.bcast(state)
        if not self._joining:
            return
        self._chain = [Kept(r, -1, np.asarray(state["entry"]), None, None,
                            survivors.Living(tuple(state["nodes"]), list(state["losses"]),
                                           list(state["replaced"])))]
        self.agree_every, self._next_every, timing = state["agree_every"]
        self._depth = under_way(self.agree_every)
        self._timing = dict(timing)
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
            die_here(self.rank, self._round_of(directory), "save")
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
        return survivors.token_count(self.spec, self.living.nodes)

    def close(self) -> None:
        self.transport.close()

