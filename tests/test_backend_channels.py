"""The MPI back end uses persistent channels only on a plain transport: the latency layer
stamps every message with its clock, so it keeps the per-round path (serial, no MPI)."""
from __future__ import annotations

from mpi_teleport.backends.mpi import _uses_channels


class Plain:
    def send_channel(self, buf, dest, kind):
        return None


class Layered:
    """Like the latency layer: a logical clock, other attributes forwarded inward."""

    def __init__(self, inner):
        self.inner, self.clock_us = inner, 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Old:
    """A transport without channels (a test double, an older layer)."""


def test_channels_on_a_plain_transport_only():
    assert _uses_channels(Plain())
    assert not _uses_channels(Layered(Plain()))
    assert not _uses_channels(Old())
