"""How vectors move between ranks: the only module of the runtime that talks MPI.

Algorithms hand the transport (peer, tag or kind, contiguous numpy array) and wait; they
never see a request or a communicator. Messages are buffer messages (uppercase MPI calls,
no pickling). Two ways to move a round's vectors (:class:`Transport` implements
:class:`~mpi_teleport.core.interfaces.ChannelTransport`):

* **Persistent channels**, the default path (the compiled rounds,
  :mod:`mpi_teleport.runtime.backends.compiled`): :meth:`Transport.send_channel` /
  :meth:`Transport.recv_channel` bind a persistent request (Send_init / Recv_init) to
  (direction, peer, kind, buffer) once; every round that moves that buffer starts it
  (``start``: Prequest.Startall) and completes it (``wait_all``: Request.Waitall).
* **Per-round messages** (the round executor, :mod:`mpi_teleport.core.algorithms.teleport`,
  used under the latency layer and with device tokens): :meth:`Transport.post_recvs` /
  :meth:`Transport.post_sends` post Irecv / Isend, :meth:`Transport.wait` completes them.
  Tags combine the round and the message kind, so a message of round t can never be
  consumed in another round; MPI's non-overtaking rule covers the (astronomically
  distant) wrap-around of the tag. A message to oneself is a local copy.

**Large messages to other hosts travel in pieces**: a numpy buffer over
``piece_bytes`` (default :data:`PIECE_BYTES`, 60 KiB; ``MPI_TELEPORT_PIECE_BYTES`` sets
it, 0 sends whole messages) for a peer on another host (by processor name, learnt with one
allgather when the transport is made) is posted as consecutive slices, each its own
Isend/Irecv (or persistent request); ``MPI_TELEPORT_PIECE_PEERS=all`` cuts messages to
every peer (tests). Within a host, shared memory moves a whole message faster (one host,
800 kB: 66 us whole, 124 us in pieces, best of 200 rounds). Pieces stay under Open MPI's TCP eager limit (64 KiB), so no piece waits for a
rendezvous handshake, whose small reply otherwise queues behind the other direction's
bulk data on a busy link (measured: benchmarks/results/wire-tc-bandwidth-2026-11-27.md). The
bytes and their destination buffers are those of the whole message, so results are bit
for bit the same. Per-round pieces share the message's tag (MPI's non-overtaking order
matches them in posting order); a channel's pieces have tags of their own
(Startall may start requests in any order).

The communicator is passed in, never taken from COMM_WORLD here.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import numpy as np

from ..errors import UsageError
from ..core.interfaces import KIND_MODEL, KIND_MOMENTUM, KIND_Y, N_KINDS  # noqa: F401


PIECE_BYTES = 60 * 1024  # below Open MPI's TCP eager limit (64 KiB, headers included)
PIECE_ENV = "MPI_TELEPORT_PIECE_BYTES"
PIPELINE_BYTES = 1 << 20  # a pipelined block of a large token, at least (backends/compiled.py)
PIPELINE_ENV = "MPI_TELEPORT_PIPELINE_BYTES"
PEERS_ENV = "MPI_TELEPORT_PIECE_PEERS"  # "hosts" (default): peers on other hosts; "all"
CHANNEL_PIECES = 1024  # tags reserved per kind for a channel's pieces (larger pieces beyond)


def _bytes_from_env(name: str, default: int, zero: str, environ=None) -> int:
    """A number of bytes >= 0 from the environment variable ``name`` (``default`` when it
    is unset; ``zero`` says what 0 means, for the message)."""
    text = (os.environ if environ is None else environ).get(name, "").strip()
    try:
        value = int(text) if text else default
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"{name}={text!r}: give a whole number of bytes >= 0 (0: {zero})")
    return value


def piece_bytes_from_env(environ=None) -> int:
    """The piece size: ``MPI_TELEPORT_PIECE_BYTES`` (0: whole messages), else PIECE_BYTES."""
    return _bytes_from_env(PIECE_ENV, PIECE_BYTES, "whole messages", environ)


def pipeline_bytes_from_env(environ=None) -> int:
    """The pipelined block: ``MPI_TELEPORT_PIPELINE_BYTES`` (0: step, send and sum tokens
    whole), else PIPELINE_BYTES."""
    return _bytes_from_env(PIPELINE_ENV, PIPELINE_BYTES, "tokens stepped, sent and summed whole",
                           environ)


def piece_peers_from_env(environ=None) -> str:
    """Whose messages are cut: ``MPI_TELEPORT_PIECE_PEERS`` = hosts (default) or all."""
    text = (os.environ if environ is None else environ).get(PEERS_ENV, "").strip().lower() or "hosts"
    if text not in ("hosts", "all"):
        raise UsageError(f"{PEERS_ENV}={text!r}: give hosts (peers on other hosts) or all")
    return text


def _agree_on_pieces(everyone: list, errors: list) -> None:
    """Every rank's (piece bytes, piece peers) from its environment: readable and the same
    on all, or one UsageError on every rank (agreed: each raises it at the same point)
    naming the variable and the ranks, since a message cut on one end must be cut alike
    on the other."""
    failed = [r for r, e in enumerate(errors) if e]
    message = None
    if failed:
        message = f"{errors[failed[0]]} (on rank {failed[0]})"
    for i, (env, default, what) in enumerate((
            (PIECE_ENV, PIECE_BYTES, "piece_bytes: the size large messages are cut to"),
            (PEERS_ENV, "hosts", "piece_peers: whose messages are cut"))):
        values = [pair[i] for pair in everyone]
        differ = [r for r, v in enumerate(values) if v != values[0]]
        if differ and message is None:
            message = (f"{env} ({what}) differs between ranks: {values[differ[0]]!r} on rank "
                       f"{differ[0]}, {values[0]!r} on rank 0 (default {default!r}); set it "
                       f"alike for every rank (mpirun -x {env}=VALUE) or for none")
    if message is not None:
        error = UsageError(message)
        error.agreed = True
        raise error


def pieces(buf, piece_bytes: int, most: int | None = None) -> list:
    """``buf`` as consecutive views of at most ``piece_bytes`` each (at most ``most`` of
    them: larger pieces then); ``[buf]`` when it is small, when pieces are off (0) or when
    it is not a C-contiguous numpy array (device tensors travel whole)."""
    if (not piece_bytes or not isinstance(buf, np.ndarray) or buf.nbytes <= piece_bytes
            or not buf.flags.c_contiguous):
        return [buf]
    flat = buf.reshape(-1)  # (a view: contiguous)
    per = max(1, piece_bytes // flat.itemsize)
    if most is not None and math.ceil(flat.size / per) > most:
        per = math.ceil(flat.size / most)
    return [flat[a:a + per] for a in range(0, flat.size, per)]


def on_host(comm, read):
    """``read`` of the communicator of this process's host (a shared-memory split of
    ``comm``, collective), which is freed after."""
    from mpi4py import MPI

    host = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return read(host)
    finally:
        host.Free()


@dataclass
class Pending:
    """Requests of one exchange, completed together by :meth:`Transport.wait`."""

    requests: list = field(default_factory=list)


class Agreement:
    """A non-blocking reduction in flight (:meth:`Transport.agree_max_start`); it holds
    the buffers until it completes."""

    def __init__(self, request, mine: np.ndarray, top: np.ndarray):
        self._request, self._mine, self._top = request, mine, top

    def wait(self) -> list[int]:
        self._request.Wait()
        return [int(v) for v in self._top]


class Transport:
    """Moves vectors between the ranks of ``comm`` (an
    :class:`~mpi_teleport.core.interfaces.ChannelTransport`: per-round messages, persistent
    channels, the collectives the layers above need)."""

    has_channels = True
    has_clock = False
    # start(channels) and wait_all(channels) (interfaces.ChannelTransport): bound in
    # __init__ to mpi4py's own Prequest.Startall and Request.Waitall, since the round loop
    # calls them every round and a wrapper would add its call to each.
    start: Callable[[list], None]
    wait_all: Callable[[list], None]

    def __init__(self, comm, owned: bool = False, piece_bytes: int | None = None,
                 _cut: list | None = None):
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm
        self._owned = owned
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        # large messages travel in pieces of at most this many bytes (0: whole) ...
        misread = None  # (this rank's environment unreadable: every rank learns it below)
        try:
            self.piece_bytes = piece_bytes_from_env() if piece_bytes is None else piece_bytes
            self.piece_peers = piece_peers_from_env()
        except UsageError as exc:
            if piece_bytes is not None or _cut is not None:
                raise
            misread, self.piece_bytes, self.piece_peers = str(exc), 0, "hosts"
        # a large token's step, sends and sum go a block of this many bytes at a time
        # (backends/compiled.py; 0: whole). A rank's own choice: it changes no message
        self.pipeline_bytes = pipeline_bytes_from_env()
        # ... to the peers on other hosts: _cut[peer] is the piece size for that peer (0:
        # whole). Learnt here, collectively, unless pieces are off or handed on (dup)
        if _cut is None and piece_bytes is None:  # (read from this rank's environment)
            # one allgather whatever the settings, so a rank whose environment differs
            # cannot skip a collective the others run: the ranks agree on the settings
            # first, then each learns its peers' hosts
            everyone = comm.allgather((MPI.Get_processor_name(), self.piece_bytes,
                                       self.piece_peers, misread))
            _agree_on_pieces([(b, p) for _, b, p, _ in everyone],
                             [e for _, _, _, e in everyone])
            names = [name for name, _, _, _ in everyone]
            _cut = [0] * self.size
            if self.piece_bytes and self.piece_peers == "all":
                _cut = [self.piece_bytes] * self.size
            elif self.piece_bytes:
                _cut = [0 if name == names[self.rank] else self.piece_bytes for name in names]
        elif _cut is None:  # (given: no collective)
            _cut = [0] * self.size
            if self.piece_bytes and self.piece_peers == "all":
                _cut = [self.piece_bytes] * self.size
            elif self.piece_bytes:
                names = comm.allgather(MPI.Get_processor_name())
                _cut = [0 if name == names[self.rank] else self.piece_bytes for name in names]
        self._cut = _cut
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        # the top N_KINDS * CHANNEL_PIECES tags are the persistent channels' (one per kind
        # and piece, see below)
        self._rounds_per_cycle = max(1, tag_ub // N_KINDS - 1 - CHANNEL_PIECES)
        self._steady_tag0 = self._rounds_per_cycle * N_KINDS
        self._local: dict[int, np.ndarray] = {}
        self._channels: dict[tuple, Any] = {}  # key -> MPI.Prequest
        self.start = MPI.Prequest.Startall
        # (cast: Waitall returns True, which the loop does not use)
        self.wait_all = cast(Callable[[list], None], MPI.Request.Waitall)

    @classmethod
    def duplicate(cls, comm, piece_bytes: int | None = None) -> "Transport":
        """A transport on a duplicate of ``comm`` (a user's communicator is never used
        directly: our messages cannot match theirs); :meth:`free` releases it."""
        return cls(comm.Dup(), owned=True, piece_bytes=piece_bytes)

    def close(self) -> None:
        """The end of a run on this transport: nothing is held back here (the back end
        releases its channels itself); the transport stays usable."""

    def free(self) -> None:
        """Release every channel and, when this transport made it, the communicator."""
        self.release_channels()
        if self._owned and self.comm is not None:
            self.comm.Free()
            self.comm = None

    def tag(self, t: int, kind: int) -> int:
        return (t % self._rounds_per_cycle) * N_KINDS + kind

    def post_recvs(self, recvs, pending: Pending | None = None) -> Pending:
        """Post receives [(source, tag, buffer)]; a source equal to self.rank waits for a
        local send with the same tag."""
        pending = pending or Pending()
        rank, irecv, requests, cut = self.rank, self.comm.Irecv, pending.requests, self._cut
        for source, tag, buf in recvs:
            if source == rank:
                self._local[tag] = buf
            else:
                for piece in pieces(buf, cut[source]):  # (in order: pieces share the tag)
                    requests.append(irecv(piece, source, tag))
        return pending

    def post_sends(self, sends, pending: Pending | None = None) -> Pending:
        """Post sends [(dest, tag, array)]; the arrays must not change until wait()."""
        pending = pending or Pending()
        rank, isend, requests, cut = self.rank, self.comm.Isend, pending.requests, self._cut
        for dest, tag, buf in sends:  # remote sends first: peers should not wait for our copies
            if dest != rank:
                for piece in pieces(buf, cut[dest]):
                    requests.append(isend(piece, dest, tag))
        for dest, tag, buf in sends:
            if dest == rank:
                np.copyto(self._local.pop(tag), buf)
        return pending

    def exchange(self, sends, recvs) -> None:
        """Post receives, then sends, and wait for all of them."""
        pending = self.post_recvs(recvs)
        self.post_sends(sends, pending)
        self.wait(pending)

    def meanwhile(self, pending, work) -> None:
        """Advance ``work`` while ``pending`` (a :class:`Pending` or a list of started
        channels) completes, testing the requests between its steps: MPI moves data only
        inside its calls, so each test lets it hand the next pieces to the network
        (interfaces.TokenTransport.meanwhile)."""
        requests = pending.requests if isinstance(pending, Pending) else pending
        if not requests:
            return
        for _ in work:
            if self.testall(requests):
                return

    def wait(self, pending: Pending) -> None:
        if pending.requests:
            self._mpi.Request.Waitall(pending.requests)
            pending.requests.clear()
        if self._local:
            raise RuntimeError(f"local receives without a matching send: tags {sorted(self._local)}")

    # Persistent channels: the round loop's default path (the latency layer stamps every
    # message and keeps the per-round path). A channel is a persistent
    # request bound to (direction, peer, kind, buffer), created once and started every
    # round that moves that buffer between those two ranks. All channels of a kind share
    # one tag per piece, outside the per-round tags: a receiver completes all of round t's
    # receives before it posts round t+1's, and at most one message per (sender,
    # receiver, kind) travels in a round, so MPI's non-overtaking order matches round t's
    # message to round t's receive. A channel is a list of persistent requests, one per
    # piece of its buffer.
    def _channel(self, send: bool, buf: np.ndarray, peer: int, kind: int) -> list:
        key = (send, peer, kind, id(buf))
        hit = self._channels.get(key)
        if hit is None:
            make = self.comm.Send_init if send else self.comm.Recv_init
            tag0 = self._steady_tag0 + kind
            hit = self._channels[key] = [
                make(piece, peer, tag0 + i * N_KINDS)
                for i, piece in enumerate(pieces(buf, self._cut[peer], CHANNEL_PIECES))]
        return hit

    def send_channel(self, buf: np.ndarray, dest: int, kind: int) -> list:
        """The persistent send of ``buf`` to ``dest`` (created on first use): its pieces'
        requests, a list."""
        return self._channel(True, buf, dest, kind)

    def recv_channel(self, buf: np.ndarray, source: int, kind: int) -> list:
        """The persistent receive into ``buf`` from ``source`` (created on first use): its
        pieces' requests, a list."""
        return self._channel(False, buf, source, kind)

    def channel_spans(self, buf: np.ndarray, peer: int) -> list[tuple[int, int]]:
        """The flat element ranges [start, stop) of ``buf`` that the requests of its
        channel with ``peer`` carry, in the channel's order (one range: whole)."""
        spans, start = [], 0
        for piece in pieces(buf, self._cut[peer], CHANNEL_PIECES):
            spans.append((start, start + piece.size))
            start += piece.size
        return spans

    def release_channels(self, buffers=None) -> None:
        """Free the channels of ``buffers`` (all channels when None): a channel holds its
        buffer; a new one is made on next use."""
        ids = None if buffers is None else {id(b) for b in buffers if b is not None}
        for key in [key for key in self._channels if ids is None or key[3] in ids]:
            for request in self._channels.pop(key):
                request.Free()

    # Collective helpers used only at logging rounds and at start-up.
    def gather_rows(self, row: np.ndarray | None, holders: np.ndarray, d: int,
                    dtype=np.float64) -> np.ndarray | None:
        """Rank 0 receives the k token rows (row of token m from rank holders[m]), in token
        order; other ranks get None. ``row`` is this rank's token vector or None."""
        from mpi4py.util.dtlib import from_numpy_dtype

        holding = np.zeros(self.size, dtype=bool)
        holding[holders] = True
        send = row if row is not None else np.zeros(0, dtype=dtype)
        if self.rank == 0:
            counts = holding.astype(np.int64) * d
            displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
            recv = np.empty(len(holders) * d, dtype=dtype)
            self.comm.Gatherv(send, [recv, counts, displs, from_numpy_dtype(dtype)], root=0)
            by_rank = recv.reshape(len(holders), d)
            position = np.cumsum(holding) - 1  # row index in by_rank of each holding rank
            return by_rank[position[holders]]
        self.comm.Gatherv(send, None, root=0)
        return None

    # Evaluation shared by the ranks (mpi_teleport.core.evaluation): logging rounds only.
    def bcast_array(self, buf: np.ndarray) -> np.ndarray:
        """Rank 0's contiguous ``buf`` into every rank's ``buf`` (same shape and dtype
        everywhere; one buffer Bcast, no pickling)."""
        self.comm.Bcast(buf, root=0)
        return buf

    def gather_rows_in_order(self, rows: np.ndarray) -> np.ndarray | None:
        """Every rank's float64 rows (r_i, c), stacked in rank order on rank 0 (None
        elsewhere); r_i may differ between ranks (0 too), c may not."""
        rows = np.ascontiguousarray(rows, dtype=np.float64)
        width = rows.shape[1]
        counts = np.array(self.comm.gather(rows.size, root=0) or [], dtype=np.int64)
        if self.rank != 0:
            self.comm.Gatherv(rows, None, root=0)
            return None
        displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        out = np.empty(int(counts.sum()), dtype=np.float64)
        self.comm.Gatherv(rows, [out, counts, displs, self._mpi.DOUBLE], root=0)
        return out.reshape(-1, width)

    # Point-to-point and requests, for layers that wrap the transport (the latency layer;
    # it completes requests with wait_all, as channels are). One message's requests, a
    # list (a large message travels in pieces).
    def irecv(self, buf: np.ndarray, source: int, tag: int) -> list:
        return [self.comm.Irecv(piece, source, tag) for piece in pieces(buf, self._cut[source])]

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> list:
        return [self.comm.Isend(piece, dest, tag) for piece in pieces(buf, self._cut[dest])]

    def testall(self, requests: list) -> bool:
        return self._mpi.Request.Testall(requests)

    def dup(self) -> "Transport":
        """A transport on a duplicate communicator (messages of one never match the
        other's); freed with :meth:`free`."""
        return Transport(self.comm.Dup(), owned=True, piece_bytes=self.piece_bytes, _cut=self._cut)

    def reduce_max(self, value: float) -> float | None:
        """max over the ranks of ``value`` on rank 0 (None elsewhere)."""
        return self.comm.reduce(value, op=self._mpi.MAX, root=0)

    def bcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def gather(self, obj) -> list | None:
        """Every rank's ``obj`` on rank 0 (a list in rank order), None elsewhere."""
        return self.comm.gather(obj, root=0)

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def agree_max(self, value: int) -> int:
        """The largest ``value`` over the ranks, on every rank (one 8-byte Allreduce)."""
        mine = np.array([value], dtype=np.int64)
        top = np.zeros(1, dtype=np.int64)
        self.comm.Allreduce(mine, top, op=self._mpi.MAX)
        return int(top[0])

    def agree_max_start(self, values) -> "Agreement":
        """The elementwise largest of ``values`` (a few integers) over the ranks, begun
        without waiting (an Iallreduce): its ``wait()`` gives the list. Every rank starts
        it at the same point among its collectives."""
        mine = np.asarray(values, dtype=np.int64)
        top = np.empty_like(mine)
        return Agreement(self.comm.Iallreduce(mine, top, op=self._mpi.MAX), mine, top)

    def host_ids(self) -> list[int]:
        """Every rank's host, numbered in order of first appearance over the ranks (by
        processor name; collective)."""
        names = self.comm.allgather(self._mpi.Get_processor_name())
        index: dict[str, int] = {}
        return [index.setdefault(name, len(index)) for name in names]

    def local_rank(self) -> int:
        """This rank's index among the ranks of its host (a shared-memory split)."""
        return on_host(self.comm, lambda host: host.Get_rank())

    def ranks_on_host(self) -> int:
        """How many ranks of the communicator share this rank's host (a shared-memory
        split, collective): each rank's share of the host's cores is cores / this."""
        return on_host(self.comm, lambda host: host.Get_size())

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        abort_job(self.comm, code)


# A rank's stderr reaches the user through the launcher, which reads it from a pipe; MPI_Abort
# makes the launcher end every process of the job, its own readers included. Written and
# flushed is not yet read: under a loaded MPICH (Hydra) a failing rank's traceback was lost
# whole once (status 1, empty stderr). A moment between the two lets it be read first.
ABORT_GRACE_S = 0.5


def abort_job(comm, code: int = 1) -> None:
    """MPI_Abort on ``comm``, after :data:`ABORT_GRACE_S` for what this rank wrote to reach
    the launcher (the job is ending; half a second does not matter to it)."""
    time.sleep(ABORT_GRACE_S)
    comm.Abort(code)
