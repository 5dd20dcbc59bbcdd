"""The MPI back end picks its executor from what the transport declares, never by probing:
the compiled rounds (persistent channels) on a transport with ``has_channels`` and host
tokens, the round executor otherwise (the latency layer stamps every message with its
clock: ``has_clock``, no channels). Serial, no MPI."""
from __future__ import annotations

import pytest

from mpi_teleport.runtime.backends.mpi import MpiBackend
from mpi_teleport.latency.layer import LatencyTransport
from mpi_teleport.problems.quadratic import quadratic
from mpi_teleport.core.spec import RunSpec
from mpi_teleport.runtime.transport import Transport


class Declared:
    def __init__(self, channels: bool):
        self.rank, self.size, self.has_channels, self.has_clock = 0, 2, channels, not channels
        self.shares_host_links = False  # (a clocked transport's: no hosts: in its model)


def backend(transport, **kwargs) -> MpiBackend:
    return MpiBackend(quadratic(2, dim=3), RunSpec("teleportation", 2, 1, 4, 0.1), transport,
                      **kwargs)


def test_channels_on_a_plain_transport_only():
    assert Transport.has_channels and not Transport.has_clock
    assert LatencyTransport.has_clock and not LatencyTransport.has_channels
    assert backend(Declared(True)).compiled
    assert not backend(Declared(False)).compiled
    assert not backend(Declared(True), compiled=False).compiled
    assert not backend(Declared(True), token_device="cpu").compiled


def test_compiled_rounds_refused_without_channels():
    with pytest.raises(ValueError, match="persistent channels"):
        backend(Declared(False), compiled=True)
