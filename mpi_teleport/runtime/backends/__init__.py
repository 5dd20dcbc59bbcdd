"""How token vectors move: the two back ends of the one engine (:mod:`mpi_teleport.runtime.engine`).

:class:`~mpi_teleport.runtime.backends.local.LocalBackend` runs every node in this process (the
simulator, vectorised over tokens); :class:`~mpi_teleport.runtime.backends.mpi.MpiBackend` runs
one node per MPI rank through a transport. Both implement
:class:`mpi_teleport.core.interfaces.Backend`, which is all the engine uses:

* ``begin(phase, start, x0, restore)``: place the phase's tokens (fresh from x0, or a
  checkpoint's), ``step(t)``: one round of every run of the phase,
* ``tokens(run)``: the run's token matrix on the root (collective), ``evaluate``,
  ``virtual_time_s(r)``,
* ``root``, ``share(fn)``, ``agree(flag)``, ``barrier()``: the few collectives of logging,
  signals and checkpoints (trivial in one process),
* ``save(directory)``, ``clocks()``, ``restore_clock``: this process's part of a checkpoint.

The MPI back end's modules: ``mpi`` (planning blocks of rounds, collectives, checkpoint
files), ``tokens`` (the token buffers), ``compiled`` (the compiled rounds on persistent
channels), ``device`` (token buffers as torch tensors); the round itself, as the paper
states it, is :mod:`mpi_teleport.core.algorithms.teleport`. Both back ends share the
arithmetic (:func:`mpi_teleport.core.algorithms.local_step`, the gossip sum in ascending token
order), so their records agree bit for bit.
"""
