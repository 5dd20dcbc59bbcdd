"""Internal: the pure core. Keyed randomness, the schedule, topologies, the per-round plan,
the run's spec, step rules and the arithmetic of the algorithms; no MPI, no files, no
front end's settings. Nothing here is public API (the package root re-exports what is).
"""
