"""Where this process runs: alone, or as one rank of a job an MPI launcher started
(``mpirun``, ``python -m mpi_teleport.launch``, ``srun``). Lets one script run unchanged
as ``python script.py`` (the simulator) and under a launcher (one node per rank):
``comm="auto"``, ``local_nodes="auto"`` and :func:`on_root`.

A launcher announces itself in each process's environment (Open MPI's
``OMPI_COMM_WORLD_SIZE``; PMI's ``PMI_SIZE``/``PMI_RANK``, as MPICH's Hydra, Intel MPI
and ``srun --mpi=pmi2`` set them; PMIx's ``PMIX_RANK``). Outside one, nothing imports
mpi4py (no MPI initialisation); inside one, ``MPI.COMM_WORLD`` says the size and rank, so
every rank decides alike.
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ["under_launcher", "auto_comm", "resolve_comm", "rank", "on_root",
           "auto_local_nodes"]

LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK")


def under_launcher(environ=None) -> bool:
    """Whether an MPI launcher started this process (its variables are set)."""
    env = os.environ if environ is None else environ
    return any(env.get(name, "") != "" for name in LAUNCHER_VARIABLES)


def _world() -> Any:
    from mpi4py import MPI

    return MPI.COMM_WORLD


def auto_comm() -> Any:
    """``comm="auto"``: ``MPI.COMM_WORLD`` when a launcher started this process with more
    than one rank, else None (the simulator)."""
    if not under_launcher():
        return None
    world = _world()
    return world if world.Get_size() > 1 else None


def resolve_comm(comm: Any) -> Any:
    """The API's ``comm``: ``"auto"`` resolved (:func:`auto_comm`), anything else as given."""
    if isinstance(comm, str) and comm == "auto":
        return auto_comm()
    return comm


def rank() -> int:
    """This process's rank in the launcher's job (0 outside one)."""
    return int(_world().Get_rank()) if under_launcher() else 0


def on_root() -> bool:
    """True in the one process that should print and save: rank 0 of a launched job.

    >>> import mpi_teleport as mt
    >>> mt.on_root()  # (one process, not under a launcher: it is the root)
    True

    Rank 0 of the job a launcher started, or the only process: ``if mt.on_root():
    torch.save(...)``."""
    return rank() == 0


def auto_local_nodes(nodes: int) -> list[int] | None:
    """``local_nodes="auto"``: ``[rank]`` when a launcher started one rank per node
    (``nodes`` ranks), else None (every node: the simulator)."""
    if not under_launcher():
        return None
    world = _world()
    if world.Get_size() > 1 and world.Get_size() == int(nodes):
        return [int(world.Get_rank())]
    return None
