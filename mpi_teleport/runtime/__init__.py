"""Internal: the runtime. The engine's loop, the back ends (simulator, MPI; elastic mode's
are in mpi_teleport/elastic), the plain MPI transport, failing together, signals,
recorders. Nothing here is public API.
"""
