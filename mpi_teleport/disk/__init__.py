"""Internal: what a run writes besides checkpoints (those are :mod:`mpi_teleport.checkpoint`):
output files, locks, where a run writes, the comparison table, ready callback writers, and
the memory this process may use (what the memory checks compare against).
Nothing here is public API except the writers the package root re-exports.
"""
