"""Command lines for test launches that mpi_teleport.launch has no use for."""
from mpi_teleport.launch import find_mpirun


def mpmd_command(apps) -> list[str]:
    """One MPI job of several app contexts, one rank each: [(working directory, argv)].
    Rank r runs apps[r] in its own directory (like ranks on nodes with local disks).
    (Open MPI 5 cannot map app contexts with --bind-to core:overload-allowed: no binding.)"""
    cmd = [find_mpirun(), "--oversubscribe"]
    for r, (wdir, argv) in enumerate(apps):
        cmd += ([":"] if r else []) + ["-n", "1", "--wdir", str(wdir), *argv]
    return cmd
