"""Internal: injectable network latency; the public way in is the latency settings (the
API's :class:`mpi_teleport.Latency`) and the command ``python -m mpi_teleport.latency
probe``.

Models (:mod:`.model`, pure), the MPI layer that applies them (:mod:`.layer`), and a
probe (:mod:`.probe`, ``python -m mpi_teleport.latency probe``). The simulator's clocks:
:mod:`mpi_teleport.latency.virtual_clock`.
"""
from .model import (CLOCKS, MOD_BASE, NONE, LatencyModel, LatencySettings,  # noqa: F401
                    needs_layer, parse_spec)
from .layer import LatencyPending, LatencyTransport, TimedProblem, warn_oversubscribed  # noqa: F401
