"""Internal: elastic mode (``--elastic``, ``--spares``, ``--fail``; mpi_teleport/DESIGN.md §11),
a run that goes on with the surviving nodes. Nothing here is public API. The engine enters
it only through its back-end interface (:class:`mpi_teleport.core.interfaces.Backend`'s
round-boundary members); nothing below the front ends imports the front ends.

* :mod:`~mpi_teleport.elastic.survivors`: the rules shared by the simulator and MPI (the
  living set, the schedule over it, restoring lost tokens, which spare takes which node,
  the failure plan ``--fail NODE@ROUND``); pure, no MPI.
* :mod:`~mpi_teleport.elastic.simulated`: the simulator's back end told of failures.
* :mod:`~mpi_teleport.elastic.transport`: the ULFM transport (agreement, revoke, shrink)
  and whether this MPI can run elastic mode.
* :mod:`~mpi_teleport.elastic.backend`: the MPI back end that survives lost ranks.
* :mod:`~mpi_teleport.elastic.spares`: the hot spares' pool, their wait and re-forming.
* :mod:`~mpi_teleport.elastic.meeting`: the survivors meet before they leave.
* :mod:`~mpi_teleport.elastic.test_hook`: tests kill a rank at a chosen round.
"""
