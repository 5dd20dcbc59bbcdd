"""The survivors meet before they leave (elastic mode, after ranks died): a barrier over the
survivors' transport, held until the command line has said why the run ended. The MPI
command line then ends with os._exit, as MPI_Finalize may wait on the dead.
"""
from __future__ import annotations

from ..errors import RankLost


class Meeting:
    """Elastic, after ranks died: the survivors meet (a barrier) before any leaves, and
    only once the line saying why is out (the MPI command line then ends with os._exit:
    MPI_Finalize may wait on the dead). When a run ends in an exception, :func:`~mpi_teleport.session.runner.train`
    (a hot spare's joining run too) hands the communicator to meet on to the caller's meeting
    (:meth:`hold`) instead of freeing it; the caller, having printed its line, calls
    :meth:`meet`. An explicit hand-over: nothing is attached to the exception."""

    def __init__(self) -> None:
        self._transport = None

    def hold(self, transport) -> None:
        """The survivors' transport (None: nothing to meet on, e.g. the simulator)."""
        self._transport = transport

    def meet(self) -> bool:
        """The survivors' barrier (a rank lost meanwhile is passed over); False when no
        transport was handed over."""
        if self._transport is None:
            return False
        survivors_meet(self._transport)
        return True


def survivors_meet(transport) -> None:
    """Elastic, after a loss: every survivor is done before any leaves (the command line
    then ends with os._exit: MPI_Finalize may wait on the dead)."""
    try:
        transport.barrier()
    except RankLost:
        pass
