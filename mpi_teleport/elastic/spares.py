"""Hot spares (``--elastic --spares S``; mpi_teleport/DESIGN.md §11.1): the job's processes
as nodes and waiting spares (:class:`SparePool`), and a spare's wait, measured
(:func:`wait_logged`).

The S spare ranks hold no node and take no part in the rounds: each waits in
:meth:`SparePool.wait` (asleep between looks for a message: about 0.4 % of a core) until
the nodes release it at the end of the run, or until it is woken because nodes died. Then
every living process re-forms the job (:meth:`SparePool.reform`); the lowest waiting spare
becomes the lowest dead node and enters the survivors' recovery of that round
(:func:`mpi_teleport.runtime.engine.execute`, ``joining``), where it receives the node's
tokens and the records; from then on it is that node.
"""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import cast

import numpy as np

from ..runtime.transport import on_host
from .survivors import assign
from .test_hook import die_here
from .transport import shrink

SPARE_LOG = "MPI_TELEPORT_SPARE_LOG"  # a directory: each spare writes spare-<id>.json there

TAG_WAKE, TAG_DONE = 1, 2  # (on the pool's own communicator: no other message shares it)
SPARE_POLL_S = 0.02  # a waiting spare looks for a message this often (see SparePool.wait)


class SparePool:
    """The job's processes as nodes and hot spares (mpi_teleport/DESIGN.md §11.1).

    Every process of the job is in ``world`` (a duplicate of the job's communicator,
    errors returned); ``roles`` maps a process (its rank in the job, its id for good) to
    the node it holds, or None while it is a spare. The nodes run on their own
    communicator (:meth:`node_comm`); the spares wait outside the rounds (:meth:`wait`).
    When nodes died, the surviving nodes wake every waiting spare (:meth:`wake`) and all
    living processes shrink ``world`` together (:meth:`reform`): the shrunk group says,
    the same everywhere, which nodes and spares died, and the lowest waiting spare takes
    over the lowest dead node (:func:`~mpi_teleport.elastic.survivors.assign`)."""

    def __init__(self, comm, nodes: int):
        from mpi4py import MPI

        self._mpi = MPI
        self.world = comm.Dup()
        self.world.Set_errhandler(MPI.ERRORS_RETURN)
        self.me = self.world.Get_rank()
        self.ids = list(range(self.world.Get_size()))  # world rank -> process id
        self.roles: dict[int, int | None] = {p: (p if p < nodes else None) for p in self.ids}
        self.since = {p: 0 for p in self.ids}  # the reform a process became a node at
        self.reforms = 0
        self.round = None  # a spare: the round of the recovery it was woken for
        self.released = None  # a spare: the exit status the nodes released it with
        self.host_nodes = None  # node ranks on this host (set at start: nodes_on_host)
        self.spares = len(self.ids) - nodes

    @property
    def node(self) -> int | None:
        """The node this process holds (None: a spare)."""
        return self.roles.get(self.me)

    def waiting(self) -> list[int]:
        """The spares not known to be dead, lowest first."""
        return sorted(p for p in self.ids if self.roles[p] is None)

    def _order(self) -> list[int]:
        """The node processes in communicator order: the oldest nodes first (the root,
        index 0, has kept every record), then by node id."""
        nodes = [p for p in self.ids if self.roles[p] is not None]
        return sorted(nodes, key=lambda p: (self.since[p], self.roles[p]))

    @property
    def root(self) -> bool:
        """This process is the nodes' root (it writes the files)."""
        order = self._order()
        return bool(order) and order[0] == self.me

    def node_order(self) -> list[int]:
        """The node ids in the nodes' communicator order."""
        return [cast(int, self.roles[p]) for p in self._order()]  # (nodes: roles not None)

    def node_comm(self):
        """(communicator of the nodes, node ids in its rank order): collective over
        ``world``; a spare gets (None, the same list)."""
        order = self._order()
        role = self.node
        color = 0 if role is not None else self._mpi.UNDEFINED
        key = order.index(self.me) if role is not None else 0
        comm = self.world.Split(color, key)
        living = [self.roles[p] for p in order]
        if comm == self._mpi.COMM_NULL:
            return None, living
        comm.Set_errhandler(self._mpi.ERRORS_RETURN)
        return comm, living

    def local_rank(self) -> int:
        """This process's index among the job's processes on its host (collective)."""
        return on_host(self.world, lambda host: host.Get_rank())

    def nodes_on_host(self) -> int:
        """How many node ranks share this process's host (collective over every process,
        spares included): a spare that becomes a node there takes the same share of the
        host's cores as its neighbours (``runner.share_cores``)."""
        mine = 1 if self.node is not None else 0
        return on_host(self.world, lambda host: int(host.allreduce(mine)))

    def _send_all(self, tag: int, *values: int, synchronous: bool = False) -> None:
        """A small message to every waiting spare; one that died is skipped (errors kept
        from every request alone, as the rounds do). ``synchronous``: each completes only
        once the spare has it (the sender is about to exit, which could drop a message
        still buffered)."""
        buf = np.array([*values, 0, 0][:2], dtype=np.int64)
        send = self.world.Issend if synchronous else self.world.Isend
        for p in self.waiting():
            try:
                send(buf, self.ids.index(p), tag).Wait()
            except self._mpi.Exception:
                pass

    def wake(self, r: int) -> None:
        """Nodes died at round r: every waiting spare joins :meth:`reform` (every surviving
        node sends, as none knows yet which of them is the lowest survivor)."""
        self._send_all(TAG_WAKE, self.reforms, r)

    def reform(self):
        """Collective over the living processes: shrink ``world``, learn who died, let the
        waiting spares take over dead nodes. Returns (dead nodes, {node: spare}, node
        communicator or None, node ids in its order)."""
        new, where = shrink(self.world)
        alive = [self.ids[i] for i in where]
        dead = sorted(self.roles[p] for p in self.ids if p not in alive and self.roles[p] is not None)
        waiting = [p for p in self.waiting() if p in alive]
        replaced, _ = assign(dead, waiting)
        self.reforms += 1
        self.roles = {p: self.roles[p] for p in alive}
        self.since = {p: self.since[p] for p in alive}
        for node, spare in replaced.items():
            self.roles[spare], self.since[spare] = node, self.reforms
        self.world, self.ids = new, alive  # (the old communicator is left alone: it has the dead)
        comm, living = self.node_comm()
        return dead, replaced, comm, living

    def wait(self, stopped=lambda: False):
        """A spare's life outside the rounds: sleep between looks for a message (a blocking
        receive polls in Open MPI's progress loop: 4-8 % of a core measured, against about
        0.4 % so), acknowledge failures that
        interrupt the look (another spare died: nothing to do), join every
        :meth:`reform` it is woken for. Returns ("node", (reform output)) once this process
        took a node over, ("done", status) when the nodes release it, ("signal", None)
        when ``stopped()``."""
        MPI = self._mpi
        buf = np.zeros(2, dtype=np.int64)
        while True:
            if stopped():
                return "signal", None
            status = MPI.Status()
            try:
                found = self.world.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            except MPI.Exception:  # a failure was noticed (of a node or a spare)
                try:
                    self.world.Ack_failed()
                except MPI.Exception:
                    pass
                found = False
            if not found:
                time.sleep(SPARE_POLL_S)
                continue
            try:
                self.world.Recv(buf, status.Get_source(), status.Get_tag())
            except MPI.Exception:
                continue
            if status.Get_tag() == TAG_DONE:
                return "done", int(buf[0])
            if status.Get_tag() == TAG_WAKE and int(buf[0]) == self.reforms:
                self.round = int(buf[1])  # (the round the nodes recover at)
                out = self.reform()
                if self.node is not None:
                    return "node", out

    def release(self, status: int) -> None:
        """The run is over: every waiting spare ends with ``status`` (the nodes' root tells
        them, once: a spare leaves at the first word)."""
        if self.root:
            self._send_all(TAG_DONE, status, synchronous=True)


def wait_logged(pool):
    """A spare's wait (:meth:`SparePool.wait`), with what it cost written to
    $MPI_TELEPORT_SPARE_LOG when set (benchmarks and tests). Tests may kill the spare as
    it starts waiting (:func:`~mpi_teleport.elastic.test_hook.die_here`, round 0)."""
    die_here(pool.me, 0, "start")
    wall, cpu = time.perf_counter(), cpu_s()
    what, value = pool.wait()
    log_wait(pool.me, what, time.perf_counter() - wall, cpu_s() - cpu)
    return what, value


def cpu_s() -> float:
    """This process's CPU time so far (user and system), in seconds."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def log_wait(spare: int, outcome: str, wall_s: float, cpu_s: float) -> None:
    """Benchmarks and tests: how long the spare waited and the CPU time it used meanwhile
    (one JSON object in $MPI_TELEPORT_SPARE_LOG/spare-<id>.json; nothing when unset)."""
    where = os.environ.get(SPARE_LOG)
    if not where:
        return
    path = Path(where) / f"spare-{spare}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"spare": spare, "outcome": outcome, "wait_s": wall_s,
                                "cpu_s": cpu_s}) + "\n")
