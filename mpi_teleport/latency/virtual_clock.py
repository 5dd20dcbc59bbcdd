"""The virtual clocks of all n nodes, computed centrally (the simulator's oracle).

Each MPI rank keeps a logical clock under the latency layer: it advances by the compute
time of each local step and, on every receive, to max(own clock, sender's clock +
delta(i, j) + bytes / bandwidth). This module computes the same clocks for every node
at once from the round's messages (:func:`mpi_teleport.core.plan.round_messages`, the same
plan the ranks execute) with the same float operations, so the simulator's
``virtual_time_s`` equals the ranks' bit for bit when the compute time is modelled
(``--compute-time``). Message sizes are those of the tokens' real dtype.

With shared host links (``hosts:`` in the spec) a message's bandwidth time depends on
every message of its communication phase; :func:`round_links` computes those loads from
the round's plan, for the oracle here and for every MPI rank
(:class:`mpi_teleport.runtime.backends.mpi.MpiBackend` hands them to the latency layer): one
computation, the same floats.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from ..core import plan
from ..core.interfaces import KIND_MODEL, KIND_MOMENTUM, KIND_Y
from ..core.schedule import Phase

if TYPE_CHECKING:
    from ..trace.spans import Spans


# the oracle's view of the host links per node (n x 2 hosts floats) is refused above this
MAX_LINK_KNOWLEDGE_BYTES = 2 ** 30


def round_plan(phase: Phase, t: int, topology, variant: str, momentum: bool) -> plan.Messages:
    """Every node's messages of round t of ``phase`` (Alg. 1 fetches from round t - 1's
    holders, or from round t's at a placement round)."""
    now = phase.roster(t)
    prev = None
    if variant == "simple":
        prev = now if phase.is_placement_round(t) else phase.roster(t - 1)
    nxt = phase.roster(t + 1) if variant == "overlap" else now
    return plan.round_messages(topology, variant, prev, now, nxt, t, momentum)


def _edges(pairs) -> tuple[np.ndarray, np.ndarray]:
    senders = [s for s, _ in pairs]
    receivers = [r for _, r in pairs]
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(senders) if senders else empty,
            np.concatenate(receivers) if receivers else empty)


def round_links(model, msgs: plan.Messages, variant: str, momentum: bool, nbytes: int,
                n: int) -> dict:
    """The host links' loads (:class:`mpi_teleport.latency.model.HostLinks`) of each
    communication phase of one round, by message kind (``interfaces.KIND_*``): Alg. 3
    sends y and momentum together (one phase); Alg. 1 moves model and momentum first
    (both count), then gossips y. Empty without ``hosts:`` in the model."""
    if not model.hosts:
        return {}
    pairs = list(msgs.groups)
    for senders, receivers in msgs.complete:  # every sender to every receiver
        pairs.append((np.repeat(senders, len(receivers)), np.tile(receivers, len(senders))))
    if variant == "overlap":
        if msgs.momentum is not None:
            pairs.append(msgs.momentum)
        links = model.host_links(*_edges(pairs), nbytes, n)
        return {KIND_Y: links, KIND_MOMENTUM: links}
    gossip = model.host_links(*_edges(pairs), nbytes, n)
    fetch_pairs = [msgs.fetch] * (2 if momentum else 1) if msgs.fetch is not None else []
    fetch = model.host_links(*_edges(fetch_pairs), nbytes, n)
    return {KIND_Y: gossip, KIND_MODEL: fetch, KIND_MOMENTUM: fetch}


class Oracle:
    """Replays the message pattern of a run (its phases in order) on n logical clocks."""

    def __init__(self, model, n: int, nbytes: int, compute_us: float, topology,
                 variant: str, momentum: bool, phases: list[Phase],
                 state_nbytes: int | None = None):
        self.model, self.n, self.nbytes = model, n, int(nbytes)
        # a token's state message (momentum: one vector; an optimizer's: several)
        self.state_nbytes = self.nbytes if state_nbytes is None else int(state_nbytes)
        self.compute = float(compute_us)
        self.topology, self.variant, self.momentum = topology, variant, momentum
        self.phases = phases
        self.clock = np.zeros(n)
        # hosts: each node's knowledge of when every host link is free of the messages
        # already on it (LatencyModel.departure_us); it travels with the messages, as the
        # MPI ranks' do in their clock messages. None without hosts:
        slots = model.link_slots(n)
        self.busy = np.zeros((n, slots)) if slots else None
        self.done = 0  # rounds charged so far (global round numbers)
        # a trace (mpi_teleport.trace.spans.Spans): each node's logical time in the rounds
        # it samples, recorded as the rounds are charged; None: off
        self.spans: Spans | None = None

    def time_s(self) -> float:
        return float(self.clock.max()) / 1e6

    def advance_to(self, r: int) -> None:
        """Charge every round t < r not charged yet."""
        for phase in self.phases:
            for t in range(max(self.done, phase.start), min(r, phase.stop)):
                self._round(phase, t)
                self.done = t + 1

    def _round(self, phase: Phase, t: int) -> None:
        msgs = round_plan(phase, t, self.topology, self.variant, self.momentum)
        links = round_links(self.model, msgs, self.variant, self.momentum, self.nbytes, self.n)
        traced = self.spans is not None and self.spans.wants(t)
        start = self.clock.copy() if traced else None
        if msgs.fetch is not None:  # Alg. 1 line 8 (model and momentum travel together)
            senders, receivers = msgs.fetch
            sent_at = self.clock[senders]
            if self.busy is not None:  # one phase on the shared links
                edges = [(senders, receivers, links.get(KIND_MODEL), self.nbytes)]
                if self.momentum and self.state_nbytes != self.nbytes:
                    edges.append((senders, receivers, links.get(KIND_MOMENTUM), self.state_nbytes))
                self._shared(edges, self.clock.copy())
            else:
                self._receive(receivers, senders, sent_at, links.get(KIND_MODEL))
                if self.momentum and self.state_nbytes != self.nbytes:  # (its own message)
                    self._receive(receivers, senders, sent_at, links.get(KIND_MOMENTUM),
                                  self.state_nbytes)
        fetched = self.clock.copy() if traced else None
        self.clock[msgs.compute] += self.compute
        stamps = self.clock.copy()  # every message of the phase leaves with these stamps
        self._gossip(msgs, stamps, links)
        if traced:
            self._trace(phase, t, msgs, start, fetched, stamps)

    def _trace(self, phase: Phase, t: int, msgs, start, fetched, computed) -> None:
        """Round t's spans on every node it involves, in logical seconds: the model's
        hand-over (Alg. 1), the step (the modelled compute time), the wait for the
        gossip inputs, and the round."""
        from ..trace.spans import HANDOVER, ROUND, STEP, WAIT

        s, end = self.spans, self.clock
        if s is None:
            return
        token: dict[int, int] = {}
        for holders in phase.roster(t):
            token.update((int(node), m) for m, node in enumerate(holders.tolist()))
        compute = {int(i) for i in np.asarray(msgs.compute).ravel().tolist()}
        moved = np.flatnonzero(end != start).tolist()
        for i in sorted(compute.union(moved)):
            m = token.get(i, -1)
            a, b, c, e = start[i] / 1e6, fetched[i] / 1e6, computed[i] / 1e6, end[i] / 1e6
            s.add(ROUND, a, e, round=t, node=i, token=m)
            if b > a:
                s.add(HANDOVER, a, b, round=t, node=i, token=m)
            if i in compute:
                s.add(STEP, c - self.compute / 1e6, c, round=t, node=i, token=m)
            if e > c:
                s.add(WAIT, c, e, round=t, node=i, token=m)

    def _gossip(self, msgs, stamps, links) -> None:
        """The gossip phase's receives (and Alg. 3's momentum hop)."""
        gossip = links.get(KIND_Y)
        if self.busy is not None:  # shared host links: one phase, links busy across phases
            edges = [(s, r, gossip, self.nbytes) for s, r in msgs.groups]
            edges += [(np.repeat(s, len(r)), np.tile(r, len(s)), gossip, self.nbytes)
                      for s, r in msgs.complete]
            if msgs.momentum is not None:
                edges.append((*msgs.momentum, links.get(KIND_MOMENTUM), self.state_nbytes))
            self._shared(edges, stamps)
            return
        for senders, receivers in msgs.groups:
            self._receive(receivers, senders, stamps[senders], gossip)
        for senders, receivers in msgs.complete:
            for a in range(0, len(receivers), 1024):
                dst = receivers[a:a + 1024]
                arrival = stamps[senders][None, :] + self.model.delay_us(
                    senders[None, :], dst[:, None], self.nbytes, gossip)
                self.clock[dst] = np.maximum(self.clock[dst], arrival.max(axis=1))
        if msgs.momentum is not None:  # Alg. 3: momentum rides m -> m, posted with y
            senders, receivers = msgs.momentum
            self._receive(receivers, senders, stamps[senders], links.get(KIND_MOMENTUM),
                          self.state_nbytes)

    def _shared(self, edges, stamps: np.ndarray) -> None:
        """One communication phase over shared host links (``hosts:``): the messages
        ``edges`` ((senders, receivers, the phase's HostLinks, bytes) each) leave at their
        senders' ``stamps``, each when the host links it crosses are free of the earlier
        phases' messages as its sender knows them (LatencyModel.departure_us), and take
        their phase's shared time. A sender then knows its own messages' links busy until
        they end; each message carries its sender's knowledge to its receiver (the MPI
        layer's clock message), which keeps the latest of both: the same max operations as
        the ranks', so the simulator's clocks equal theirs bit for bit."""
        model, busy = self.model, cast(np.ndarray, self.busy)
        half = busy.shape[1] // 2
        known = busy.copy()
        sent = []
        for src, dst, links, nbytes in edges:
            src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
            if src.size == 0:
                continue
            leave = model.departure_us(src, dst, stamps[src], busy[src])
            np.maximum.at(self.clock, dst, leave + model.delay_us(src, dst, nbytes, links))
            a, b = model.host_of(src), model.host_of(dst)
            cross = np.flatnonzero(a != b)
            end = leave[cross] + model.wire_us(src[cross], dst[cross], nbytes, links)
            np.maximum.at(known, (src[cross], a[cross]), end)  # the sender's own messages
            np.maximum.at(known, (src[cross], half + b[cross]), end)
            sent.append((src, dst))
        carried = [(dst, known[src]) for src, dst in sent]  # the senders' knowledge, as sent
        for dst, rows in carried:
            np.maximum.at(known, dst, rows)
        self.busy = known

    def _receive(self, dst: np.ndarray, src: np.ndarray, sent_at: np.ndarray, links=None,
                 nbytes: int | None = None) -> None:
        """clock[dst] = max(clock[dst], sent_at + delay(src, dst)) for messages of
        ``nbytes`` (default: a token's); dst distinct."""
        size = self.nbytes if nbytes is None else nbytes
        arrival = sent_at + self.model.delay_us(src, dst, size, links)
        self.clock[dst] = np.maximum(self.clock[dst], arrival)


def for_run(spec, latency, dim: int, itemsize: int) -> Oracle:
    """The oracle of one run (:class:`mpi_teleport.core.spec.RunSpec`) under the latency
    settings (:class:`mpi_teleport.latency.model.LatencySettings`), for tokens of ``dim``
    elements of ``itemsize`` bytes, with its modelled compute time
    (``LatencySettings.compute_us``: 0 when not modelled, the simulator does not measure
    its steps)."""
    from ..errors import UsageError
    from .model import parse_spec

    model = parse_spec(latency.spec, spec.nodes)
    if model.host_auto:
        raise UsageError(f"--latency {latency.spec!r}: hosts:auto takes the ranks' hosts from "
                         f"MPI's placement, which the simulator has not; give hosts:R (ranks "
                         f"per host) or hosts:A+B+... (the hosts' sizes in rank order)")
    slots = model.link_slots(spec.nodes)
    if spec.nodes * slots * 8 > MAX_LINK_KNOWLEDGE_BYTES:
        raise UsageError(f"--latency {latency.spec!r}: {slots // 2} hosts of {spec.nodes} nodes: "
                         f"the simulator keeps every node's view of every host link "
                         f"({spec.nodes * slots * 8 / 2**30:.1f} GiB); put more ranks on a host "
                         f"(hosts:R) or leave hosts: out")
    return Oracle(model, spec.nodes, dim * itemsize,
                  latency.compute_us, spec.topology, spec.moves, spec.state_slots > 0,
                  spec.phases(), max(1, spec.state_slots) * dim * itemsize)
