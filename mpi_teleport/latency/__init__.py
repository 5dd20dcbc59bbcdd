"""Injectable network latency: models (:mod:`.model`, pure), the MPI layer that
applies them (:mod:`.layer`), and a probe (:mod:`.probe`, ``python -m
mpi_teleport.latency probe``). The simulator's clocks: :mod:`mpi_teleport.latency.virtual_clock`.
"""
from .model import CLOCKS, MOD_BASE, NONE, LatencyModel, check_compute_time, parse_spec
from ..core.spec import needs_layer  # noqa: F401
from .layer import LatencyPending, LatencyTransport, TimedProblem, warn_oversubscribed  # noqa: F401
