"""Internal: the front ends' plumbing. The command line's flags and TOML (config), the one
validator (settings), the checks against the disk (preflight, resume), the API's
checks, the run function's driver (runner), the launcher's MPI detection. The public
entry points are :mod:`mpi_teleport.api`, :mod:`mpi_teleport.sim`,
:mod:`mpi_teleport.run` and :mod:`mpi_teleport.launch`.
"""
