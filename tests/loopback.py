"""A transport between thread-ranks of this process (tests only): n back ends run in n
threads and exchange vectors through FIFO queues, one per (source, destination, tag or
channel kind), as MPI's non-overtaking order between a pair for one tag. It has both the
per-round messages of the round executor and the persistent channels of the compiled
rounds (an interfaces.ChannelTransport without collectives), so the two executors can be
run and compared without MPI (tests/test_executors.py)."""
from __future__ import annotations

import queue
import threading

import numpy as np

WAIT_S = 30  # a lost message fails the test instead of hanging it
ROUNDS_PER_CYCLE = 1 << 10


class Hub:
    """The wires between n thread-ranks."""

    def __init__(self, n: int):
        self.n = n
        self._queues: dict[tuple, queue.Queue] = {}
        self._lock = threading.Lock()

    def wire(self, src: int, dest: int, label: tuple) -> queue.Queue:
        with self._lock:
            return self._queues.setdefault((src, dest, label), queue.Queue())


class _Channel:
    def __init__(self, send: bool, src: int, dest: int, kind: int, buf: np.ndarray,
                 piece: int = 0):
        self.send, self.src, self.dest, self.kind, self.buf = send, src, dest, kind, buf
        self.piece = piece  # its index among its buffer's pieces (its own wire)


class Loopback:
    """Rank ``rank``'s transport on ``hub``."""

    has_channels, has_clock = True, False

    def __init__(self, hub: Hub, rank: int, piece_elements: int = 0):
        self.hub, self.rank, self.size = hub, rank, hub.n
        # channels cut into pieces of this many elements (0: whole), as the MPI transport
        # cuts them for peers on other hosts
        self.piece_elements = piece_elements
        self._channels: dict[tuple, list[_Channel]] = {}
        self._local: dict[int, np.ndarray] = {}
        self.messages = 0  # per-round messages sent to other ranks
        self.started = 0  # channel starts

    # -- per-round messages ---------------------------------------------------------------
    def tag(self, t: int, kind: int) -> int:
        return (t % ROUNDS_PER_CYCLE) * 4 + kind

    def post_recvs(self, recvs, pending=None):
        pending = [] if pending is None else pending
        for source, tag, buf in recvs:
            if source == self.rank:  # as the MPI transport: a local send fills it
                self._local[tag] = buf
            else:
                pending.append((source, tag, buf))
        return pending

    def post_sends(self, sends, pending=None):
        pending = [] if pending is None else pending
        for dest, tag, buf in sends:
            if dest != self.rank:
                self.messages += 1
                self.hub.wire(self.rank, dest, ("tag", tag)).put(buf.copy())
        for dest, tag, buf in sends:
            if dest == self.rank:
                np.copyto(self._local.pop(tag), buf)
        return pending

    def wait(self, pending) -> None:
        for source, tag, buf in pending:
            np.copyto(buf, self.hub.wire(source, self.rank, ("tag", tag)).get(timeout=WAIT_S))
        pending.clear()
        assert not self._local, f"local receives without a matching send: {sorted(self._local)}"

    def meanwhile(self, pending, work) -> None:
        """One step of the work, whatever the messages: its owner finishes the rest (as
        when MPI's requests complete early), so both paths are taken."""
        next(work, None)

    def exchange(self, sends, recvs) -> None:
        pending = self.post_recvs(recvs)
        self.post_sends(sends, pending)
        self.wait(pending)

    # -- persistent channels --------------------------------------------------------------
    def _channel(self, send: bool, buf, peer: int, kind: int) -> list:
        key = (send, peer, kind, id(buf))
        if key not in self._channels:
            src, dest = (self.rank, peer) if send else (peer, self.rank)
            self._channels[key] = [_Channel(send, src, dest, kind, buf.reshape(-1)[a:b], i)
                                   for i, (a, b) in enumerate(self.channel_spans(buf, peer))]
        return self._channels[key]

    def send_channel(self, buf, dest, kind):
        return self._channel(True, buf, dest, kind)

    def recv_channel(self, buf, source, kind):
        return self._channel(False, buf, source, kind)

    def channel_spans(self, buf, peer):
        per = self.piece_elements or buf.size
        return [(a, min(a + per, buf.size)) for a in range(0, buf.size, per)]

    def start(self, channels) -> None:
        self.started += len(channels)
        for c in channels:
            if c.send:  # the data as it is when the send starts
                self.hub.wire(c.src, c.dest, ("channel", c.kind, c.piece)).put(c.buf.copy())

    def wait_all(self, channels) -> None:
        for c in channels:
            if not c.send:
                wire = self.hub.wire(c.src, c.dest, ("channel", c.kind, c.piece))
                np.copyto(c.buf, wire.get(timeout=WAIT_S))

    def release_channels(self, buffers=None) -> None:
        ids = None if buffers is None else {id(b) for b in buffers if b is not None}
        for key in [key for key in self._channels if ids is None or key[3] in ids]:
            del self._channels[key]

    def close(self) -> None:
        pass


def serialised(phase):
    """The phase with its schedule evaluated under a lock: under MPI every rank is a
    process with its own; the thread-ranks share one, and the schedule need not be
    thread-safe."""
    from mpi_teleport.core.schedule import Phase

    lock = threading.Lock()

    def locked(fn):
        if fn is None:
            return None

        def call(*args):
            with lock:
                return fn(*args)
        return call

    return Phase(locked(phase.roster), phase.start, phase.stop, phase.fresh, locked(phase.block))
