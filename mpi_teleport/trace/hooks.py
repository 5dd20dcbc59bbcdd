"""Spans around what the round executor and the local step call, without touching them.

Used only when a trace is on (the back end wraps its problem and transport once): the
algorithms (:mod:`mpi_teleport.core.algorithms.teleport`) and the problems stay unaware
of the trace. Each wrapper holds ``spans``: the buffer while the current round is
recorded, None otherwise (the back end sets it every round).
"""
from __future__ import annotations

from .spans import GRADIENT, POST, PREPARE, SEND, STEP, SUM, WAIT


class TracedProblem:
    """The problem as the local step sees it, each ``gradient`` (and
    ``gradient_columns``) call a span inside the step; every other member is the
    problem's own."""

    def __init__(self, problem):
        self._problem = problem
        self.spans = None
        if getattr(problem, "gradient_columns", None) is not None:
            self.gradient_columns = self._gradient_columns

    def __getattr__(self, name):  # (only for what this class does not define)
        return getattr(self._problem, name)

    def gradient(self, nodes, x, t, out=None):
        s = self.spans
        if s is None:
            return self._problem.gradient(nodes, x, t, out=out)
        a = s.begin(GRADIENT)
        g = self._problem.gradient(nodes, x, t, out=out)
        s.end(GRADIENT, a)
        return g

    def _gradient_columns(self, *args, **kwargs):
        s = self.spans
        if s is None:
            return self._problem.gradient_columns(*args, **kwargs)
        a = s.begin(GRADIENT)
        g = self._problem.gradient_columns(*args, **kwargs)
        s.end(GRADIENT, a)
        return g


def _peer(items) -> int:
    peers = {item[0] for item in items}
    return next(iter(peers)) if len(peers) == 1 else -1


class TracedTransport:
    """The transport as the round executor sees it: posting receives and sends, the
    work done meanwhile and the waits are spans; everything else is the transport's."""

    def __init__(self, transport):
        self._transport = transport
        self.spans = None

    def __getattr__(self, name):
        return getattr(self._transport, name)

    def post_recvs(self, recvs, pending=None):
        s = self.spans
        if s is None:
            return self._transport.post_recvs(recvs, pending)
        a = s.begin(POST)
        out = self._transport.post_recvs(recvs, pending)
        s.end(POST, a, _peer(recvs))
        return out

    def post_sends(self, sends, pending=None):
        s = self.spans
        if s is None:
            return self._transport.post_sends(sends, pending)
        a = s.begin(SEND)
        out = self._transport.post_sends(sends, pending)
        s.end(SEND, a, _peer(sends))
        return out

    def meanwhile(self, pending, work):
        s = self.spans
        if s is None:
            return self._transport.meanwhile(pending, work)
        a = s.begin(PREPARE)
        self._transport.meanwhile(pending, work)
        s.end(PREPARE, a)

    def wait(self, pending):
        s = self.spans
        if s is None:
            return self._transport.wait(pending)
        a = s.begin(WAIT)
        self._transport.wait(pending)
        s.end(WAIT, a)

    def exchange(self, sends, recvs):
        """Post receives, then sends, and wait (each a span)."""
        pending = self.post_recvs(recvs)
        self.post_sends(sends, pending)
        self.wait(pending)


def traced_call(fn, kind: int, holder):
    """``fn`` recorded as a span of ``kind`` in ``holder.spans`` (when set)."""

    def call(*args, **kwargs):
        s = holder.spans
        if s is None:
            return fn(*args, **kwargs)
        a = s.begin(kind)
        out = fn(*args, **kwargs)
        s.end(kind, a)
        return out

    return call


__all__ = ["TracedProblem", "TracedTransport", "traced_call", "STEP", "SUM"]
