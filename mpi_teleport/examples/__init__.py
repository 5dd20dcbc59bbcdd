"""Runnable examples of the public API (each: ``python -m mpi_teleport.examples.NAME``).

* :mod:`~mpi_teleport.examples.logistic`: a numpy :class:`~mpi_teleport.Problem`
  (regularised logistic regression, data split over the nodes), through the API and
  through ``--problem mpi_teleport.examples.logistic:problem``.
* :mod:`~mpi_teleport.examples.custom_model`: your own PyTorch model and data set with
  :class:`~mpi_teleport.TorchProblem`, Teleportation and ``search_k``.
* :mod:`~mpi_teleport.examples.plain_script` and its port
  :mod:`~mpi_teleport.examples.ported_script`: a usual PyTorch training script (CNN,
  Dataset augmentation, weight decay, cosine learning rate, macro-F1, CSV log) before
  and after moving it onto mpi_teleport (80 code lines against 68).
"""
