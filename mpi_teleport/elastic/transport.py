"""The transport that survives lost ranks (ULFM): a :class:`~mpi_teleport.runtime.transport.Transport`
whose messages never raise, whose round boundary is an agreement over the survivors
(MPI_Comm_agree / MPIX_Comm_iagree), whose collectives revoke the communicator when they
fail, and which shrinks to the survivors (mpi_teleport/DESIGN.md §11). Also whether this
MPI can run elastic mode at all (:func:`ulfm_problem`).

The communicator is passed in, never taken from COMM_WORLD here.
"""
from __future__ import annotations

import numpy as np

from ..errors import UsageError
from ..runtime.transport import Pending, Transport


def shrink(comm):
    """ULFM: the survivors of ``comm`` in a new communicator (errors returned, not fatal)
    and, for each of its ranks, that process's rank in ``comm`` (collective over the
    survivors; ``comm`` is left alone: freeing it may wait on the dead)."""
    from mpi4py import MPI

    try:
        comm.Ack_failed()
    except (MPI.Exception, AttributeError):
        pass
    new = comm.Shrink()
    new.Set_errhandler(MPI.ERRORS_RETURN)
    where = MPI.Group.Translate_ranks(new.Get_group(), list(range(new.Get_size())),
                                      comm.Get_group())
    return new, where


def ulfm_problem() -> str | None:
    """Why this MPI cannot run --elastic (None when it can): elastic mode needs ULFM
    (Open MPI 5 started with ``mpirun --with-ft ulfm``)."""
    import os

    from mpi4py import MPI

    version = MPI.Get_library_version()
    if "Open MPI" not in version:
        name = version.split(",")[0].split("\n")[0].strip() or "this MPI"
        return (f"--elastic needs an MPI with ULFM (Open MPI 5 under mpirun --with-ft ulfm); "
                f"{name} has none: run without --elastic and requeue with --resume "
                f"(the manual: docs/howto/which-mpi.md)")
    if not hasattr(MPI.Comm, "Agree") or os.environ.get("OMPI_MCA_mpi_ft_enable") not in ("1", "true"):
        return ("--elastic needs ULFM switched on: launch with mpirun --with-ft ulfm (python -m "
                "mpi_teleport.launch adds it), not srun or plain mpirun")
    return None


def refuse_without_ulfm() -> None:
    """Elastic mode under MPI needs ULFM (Open MPI under ``mpirun --with-ft ulfm``):
    refused in one line (UsageError) otherwise, saying how to launch."""
    problem = ulfm_problem()
    if problem:
        raise UsageError(problem)


class ElasticTransport(Transport):
    """A transport that survives the death of ranks (ULFM; mpi_teleport/DESIGN.md §11;
    an :class:`~mpi_teleport.core.interfaces.FaultTolerantTransport`).

    ``pool``: the job's hot spares (a :class:`~mpi_teleport.elastic.spares.SparePool`), if
    any. Ranks keep their node ids (``rank``); ``living`` lists the nodes still in the run in
    communicator order, ``index`` is this node's place among them (the root is index 0:
    the lowest surviving node). Per-round messages never raise: every request is waited
    for alone and a failure is remembered, to be agreed on at the round boundary
    (:meth:`settle`, MPI_Comm_agree); a collective that fails revokes the communicator
    (so no survivor waits in another collective) and raises RankLost. :meth:`shrink`
    acknowledges the failures and continues on a communicator of the survivors.

    Persistent channels too (the compiled rounds run between agreements): a channel is
    bound to the communicator, so :meth:`shrink` frees them all and the back end compiles
    its rounds again over the survivors' communicator. Starting and completing channels
    never raises either (a failed request is remembered, the others completed one by one).
    :meth:`start_agreement` / :meth:`finish_agreement`: the boundary's agreement without
    waiting for it (MPIX_Comm_iagree), completed at a later boundary.
    """

    has_channels = True

    def __init__(self, comm, pool=None, living=None, joined=False):
        import mpi4py

        mpi4py.rc.fast_reduce = False  # (the pickled reductions deadlock after a revoke otherwise)
        # (a spare that took a node over gets the reformed communicator itself: the others
        # hold it already, a Dup would wait for them)
        comm = comm if joined else comm.Dup()
        super().__init__(comm, owned=True, piece_bytes=0)  # (whole messages: no collective)
        comm.Set_errhandler(self._mpi.ERRORS_RETURN)
        # With hot spares the nodes' communicator is the pool's, in its order (a spare that
        # took a node over has that node's id as ``rank``)
        self.pool = pool
        self.spares = pool.spares if pool is not None else 0  # (the job's hot spares)
        self.living = list(living) if living is not None else list(range(self.size))
        if pool is not None:
            self.rank = pool.node
        self.index = self.comm.Get_rank()
        self._peer = {node: i for i, node in enumerate(self.living)}
        self.failed = False  # a request of this round failed (agreed on by settle)
        self.shrunk = False  # ranks died (the job then ends with os._exit: see runner)
        self.replaced: dict[int, int] = {}  # the last shrink's {node: spare}
        self.agreed = 0  # the last settle's agreed value (its ``value`` bits' AND)
        # (the base class binds start and wait_all to mpi4py's own calls, which raise on a
        # failed request: here they are the methods below)
        self.start, self.wait_all = self._start, self._wait_all

    # -- persistent channels: never raise, remember ----------------------------------------
    def _channel(self, send: bool, buf: np.ndarray, peer: int, kind: int) -> list:
        key = (send, peer, kind, id(buf))  # (peer: a node id; whole messages, no pieces)
        hit = self._channels.get(key)
        if hit is None:
            make = self.comm.Send_init if send else self.comm.Recv_init
            hit = self._channels[key] = [make(buf, self._peer[peer], self._steady_tag0 + kind)]
        return hit

    def channel_spans(self, buf: np.ndarray, peer: int) -> list[tuple[int, int]]:
        return [(0, buf.size)]

    def _start(self, requests: list) -> None:
        try:
            self._mpi.Prequest.Startall(requests)
        except self._mpi.Exception:
            self.failed = True

    def _wait_all(self, requests: list) -> None:
        try:
            self._mpi.Request.Waitall(requests)
        except self._mpi.Exception:  # each completes or fails: every survivor goes on
            self.failed = True
            for request in requests:
                try:
                    request.Wait()
                except self._mpi.Exception:
                    pass

    def testall(self, requests: list) -> bool:
        try:
            return self._mpi.Request.Testall(requests)
        except self._mpi.Exception:  # (the wait that follows completes the rest one by one)
            self.failed = True
            return True

    def release_channels(self, buffers=None) -> None:
        try:
            super().release_channels(buffers)
        except self._mpi.Exception:  # (a request on a communicator with dead ranks)
            self._channels.clear()

    # -- per-round messages: never raise, remember -----------------------------------------
    def post_recvs(self, recvs, pending: Pending | None = None) -> Pending:
        pending = pending or Pending()
        for source, tag, buf in recvs:
            if source == self.rank:
                self._local[tag] = buf
                continue
            try:
                pending.requests.append(self.comm.Irecv(buf, self._peer[source], tag))
            except self._mpi.Exception:
                self.failed = True
        return pending

    def post_sends(self, sends, pending: Pending | None = None) -> Pending:
        pending = pending or Pending()
        for dest, tag, buf in sends:
            if dest == self.rank:
                continue
            try:
                pending.requests.append(self.comm.Isend(buf, self._peer[dest], tag))
            except self._mpi.Exception:
                self.failed = True
        for dest, tag, buf in sends:
            if dest == self.rank:
                np.copyto(self._local.pop(tag), buf)
        return pending

    def wait(self, pending: Pending) -> None:
        # One Wait per request, not Waitall: every request completes or fails, so every
        # survivor reaches the round's agreement (as measured with lost ranks).
        for request in pending.requests:
            try:
                request.Wait()
            except self._mpi.Exception:
                self.failed = True
        pending.requests.clear()
        self._local.clear()

    # -- the round boundary --------------------------------------------------------------------
    def settle(self, ok: bool = True, value: int = 0) -> bool:
        """Collective over the survivors: True when every rank finished the round and none
        saw a failure (MPI_Comm_agree; it also fails when a rank died unseen). ``value``:
        bits 1.. of the agreed word, their AND over the ranks left in :attr:`agreed`."""
        flag = (int(bool(ok) and not self.failed) & 1) | (value << 1)
        self.failed = False
        try:
            word = int(self.comm.Agree(flag))
        except self._mpi.Exception:
            return False
        self.agreed = word >> 1
        return bool(word & 1)

    def start_agreement(self, ok: bool = True):
        """:meth:`settle` without waiting (MPIX_Comm_iagree): the request and its word, for
        :meth:`finish_agreement`. MPI progresses it inside the following rounds' calls."""
        word = np.array([int(bool(ok) and not self.failed)], dtype=np.intc)
        self.failed = False
        try:
            return self.comm.Iagree(word), word
        except self._mpi.Exception:
            return None, word

    def finish_agreement(self, pending) -> bool:
        """The outcome of :meth:`start_agreement`'s agreement (waits for it)."""
        request, word = pending
        if request is None:
            return False
        try:
            request.Wait()
        except self._mpi.Exception:
            return False
        return bool(word[0] & 1)

    def shrink(self, r: int = -1) -> list[int]:
        """Acknowledge the failures, continue on a communicator of the survivors; returns
        the nodes that died (the same on every survivor: read from the shrunk group). With
        a pool, spares take over dead nodes (``replaced``) and join the communicator."""
        self.shrunk = True
        self.release_channels()  # (bound to the communicator being replaced)
        if self.pool is not None:
            self.pool.wake(r)
            dead, self.replaced, comm, living = self.pool.reform()
            self.comm, self.living = comm, living
            self._peer = {node: i for i, node in enumerate(living)}
            self.index, self.size = comm.Get_rank(), comm.Get_size()
            self._local.clear()
            self.failed = False
            return dead
        new, where = shrink(self.comm)
        alive = [self.living[i] for i in where]
        dead = sorted(set(self.living) - set(alive))
        self.comm, self.living = new, alive  # (the old communicator is left alone: freeing it may wait on the dead)
        self._peer = {node: i for i, node in enumerate(alive)}
        self.index, self.size = new.Get_rank(), new.Get_size()
        self._local.clear()
        self.failed = False
        return dead

    # -- collectives: revoke on failure --------------------------------------------------------
    def _guard(self, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except self._mpi.Exception as exc:
            try:
                self.comm.Revoke()
            except self._mpi.Exception:
                pass
            from ..errors import RankLost

            # (the MPI error said: a loss is PROC_FAILED or REVOKED; anything else is a bug
            # worth seeing, not a guess)
            raise RankLost(f"a rank died during a collective ({error_name(exc)})") from None

    def gather_rows(self, row, holders, d, dtype=np.float64):
        holding = np.zeros(self.size, dtype=bool)
        at = np.array([self._peer[int(h)] for h in holders], dtype=np.int64)
        holding[at] = True
        send = row if row is not None else np.zeros(0, dtype=dtype)
        if self.index != 0:
            self._guard(self.comm.Gatherv, send, None, 0)
            return None
        from mpi4py.util.dtlib import from_numpy_dtype

        counts = holding.astype(np.int64) * d
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        recv = np.empty(len(holders) * d, dtype=dtype)
        self._guard(self.comm.Gatherv, send, [recv, counts, displs, from_numpy_dtype(dtype)], 0)
        position = np.cumsum(holding) - 1
        return recv.reshape(len(holders), d)[position[at]]

    def gather_rows_in_order(self, rows):
        rows = np.ascontiguousarray(rows, dtype=np.float64)
        width = rows.shape[1]
        counts = np.array(self.gather(rows.size) or [], dtype=np.int64)
        if self.index != 0:
            self._guard(self.comm.Gatherv, rows, None, 0)
            return None
        displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        out = np.empty(int(counts.sum()), dtype=np.float64)
        self._guard(self.comm.Gatherv, rows, [out, counts, displs, self._mpi.DOUBLE], 0)
        return out.reshape(-1, width)

    def bcast_array(self, buf):
        self._guard(self.comm.Bcast, buf, 0)
        return buf

    def reduce_max(self, value):
        return self._guard(self.comm.reduce, value, self._mpi.MAX, 0)

    def bcast(self, obj):
        return self._guard(self.comm.bcast, obj, 0)

    def gather(self, obj):
        return self._guard(self.comm.gather, obj, 0)

    def allgather(self, obj):
        return self._guard(self.comm.allgather, obj)

    def agree_max(self, value: int) -> int:
        mine = np.array([value], dtype=np.int64)
        top = np.zeros(1, dtype=np.int64)
        self._guard(self.comm.Allreduce, mine, top, self._mpi.MAX)
        return int(top[0])

    def barrier(self) -> None:
        self._guard(self.comm.Barrier)


def error_name(exc) -> str:
    """An MPI exception's error class and text, e.g. 'MPI_ERR_PROC_FAILED: ...'."""
    try:
        return exc.Get_error_string().strip() or str(exc)
    except Exception:  # noqa: BLE001  (a message, never a second failure)
        return str(exc)
