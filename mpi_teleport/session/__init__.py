"""Internal: one run's settings, from either front end to the engine's entrance.

The settings table (:mod:`.settings`: one row a setting, its flag, keyword, check,
record and resume rule), the one preparation of a run (:mod:`.prepare`: values, the disk
check, :class:`~.prepare.RunSettings`) and :func:`~.runner.train`, which runs one. The
front ends (:mod:`mpi_teleport.front`: the command lines; :mod:`mpi_teleport.api`: the
training functions) build on it; nothing here imports them.
"""
