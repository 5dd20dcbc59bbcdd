"""Internal: what a run writes besides checkpoints (those are :mod:`mpi_teleport.checkpoint`):
output files, locks, where a run writes, the comparison table, ready callback writers.
Nothing here is public API except the writers the package root re-exports.
"""
