"""Runnable examples of the public API (each: ``python -m mpi_teleport.examples.NAME``).

* :mod:`~mpi_teleport.examples.logistic`: a numpy :class:`~mpi_teleport.Problem`
  (regularised logistic regression, data split over the nodes), through the API and
  through ``--problem mpi_teleport.examples.logistic:problem``.
* :mod:`~mpi_teleport.examples.custom_model`: your own PyTorch model and data set with
  :class:`~mpi_teleport.TorchProblem`, Teleportation and ``search_k``.
"""
