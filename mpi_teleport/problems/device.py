"""Which torch device a process computes on.

The local rank (a rank's index among the ranks on its machine) comes from the caller:
the MPI layer computes it (a shared-memory split of the communicator, joined by every
rank), so this module, like all of ``problems``, never talks MPI.
"""
from __future__ import annotations


def pick_device(requested: str, local_rank: int = 0) -> str:
    """``"cpu"`` or ``"cuda:<local_rank mod visible GPUs>"``.

    Parameters
    ----------
    requested : {"auto", "cuda", "cpu"}
        ``auto``: a GPU when one is visible, else the CPU; ``cuda``: a GPU or a usage
        error; ``cpu``: the CPU.
    local_rank : int
        This process's rank among the processes on its machine (0 alone).

    Raises
    ------
    UsageError
        ``requested == "cuda"`` and torch sees no CUDA device (one line, with the
        remedy).
    """
    import torch

    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return "cpu"
    if not torch.cuda.is_available():
        from ..errors import UsageError

        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise UsageError(f"--device cuda: no CUDA device is visible to this process (torch "
                         f"{torch.__version__}, {build}); ask the job for GPUs, check "
                         "CUDA_VISIBLE_DEVICES, or use --device auto / cpu")
    return f"cuda:{int(local_rank) % torch.cuda.device_count()}"
