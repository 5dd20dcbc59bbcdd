"""Internal: the command lines' front end. The job a command line describes (both runs of
``--algorithm compare``, a problem built from flags, ``--k auto``) made into the runs'
settings (:mod:`mpi_teleport.session`), the start-up agreement of the ranks, the tables
printed at the end, a hot spare's wait, and the launcher's MPI detection. The Python
API's front end is :mod:`mpi_teleport.api`; the entry points are
:mod:`mpi_teleport.sim`, :mod:`mpi_teleport.run` and :mod:`mpi_teleport.launch`.
"""
