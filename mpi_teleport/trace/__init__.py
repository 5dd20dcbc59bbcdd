"""Internal: a timeline of every rank's rounds; the public way in is the ``trace`` setting
and the file it writes, documented in the manual.

A timeline of every rank's rounds (``--trace PATH``, API ``trace=``,
``$MPI_TELEPORT_TRACE``): where the time of a run goes.

Every process records spans (its local step and the gradient inside it, the sends,
receives and the waits for them, the gossip sum, the token's hand-over, evaluation,
checkpoints, elastic agreement and recovery, a spare's join; :mod:`.spans`) into a buffer
allocated once, bounded by ``$MPI_TELEPORT_TRACE_ROUNDS`` (rounds recorded, default 1000)
and ``$MPI_TELEPORT_TRACE_EVERY`` (one round in this many, default 1). The job writes one
Chrome trace-event file (:mod:`.chrome`; Perfetto, chrome://tracing), one process per rank,
the clocks aligned at the start, at every checkpoint and at the end (:mod:`.tracer`). The
simulator writes the same file for its simulated nodes, on their logical clocks under the
virtual clock. Where torch uses CUDA the spans are NVTX ranges too (Nsight Systems).

``python -m mpi_teleport.trace FILE`` says where the time went (:mod:`.summary`).
"""
from .spans import KINDS, Spans
from .tracer import Tracer

__all__ = ["KINDS", "Spans", "Tracer"]
