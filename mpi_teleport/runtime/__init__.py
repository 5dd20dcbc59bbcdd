"""Internal: the runtime. The engine's loop, the back ends (simulator, MPI, elastic), the
transport (the only module that talks MPI), failing together, signals, recorders.
Nothing here is public API.
"""
