"""Which torch device a process computes on.

The local rank (a rank's index among the ranks on its machine) comes from the caller:
the MPI layer computes it (a shared-memory split of the communicator, joined by every
rank), so this module, like all of ``problems``, never talks MPI.
"""
from __future__ import annotations


def accelerator() -> tuple[str, int] | None:
    """The accelerator torch knows in this process, as (type, devices): ``torch.accelerator``
    (CUDA, ROCm as cuda, MPS, XPU, ...) where torch has it, else CUDA; None when none."""
    import torch

    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "current_accelerator"):
        if not acc.is_available():
            return None
        kind = acc.current_accelerator().type
        count = acc.device_count() if hasattr(acc, "device_count") else 1
        return kind, max(1, int(count))
    if torch.cuda.is_available():
        return "cuda", torch.cuda.device_count()
    return None


def pick_device(requested: str, local_rank: int = 0) -> str:
    """``"cpu"`` or ``"<accelerator>:<local_rank mod its devices>"`` (``"mps"`` alone).

    Parameters
    ----------
    requested : str
        ``auto``: the accelerator torch knows (:func:`accelerator`: CUDA, MPS, XPU, ...)
        when one is available, else the CPU; ``cuda`` (or another accelerator's type):
        one of its devices or a usage error; ``cpu``: the CPU.
    local_rank : int
        This process's rank among the processes on its machine (0 alone).

    Raises
    ------
    UsageError
        An accelerator asked for that torch does not see (one line, with the remedy).
    """
    import torch

    if requested == "cpu":
        return "cpu"
    found = accelerator()
    if requested == "auto":
        if found is None:
            return "cpu"
        requested = found[0]
    if found is None or found[0] != requested:
        from ..errors import UsageError

        if requested == "cuda":
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise UsageError(f"--device cuda: no CUDA device is visible to this process (torch "
                             f"{torch.__version__}, {build}); ask the job for GPUs, check "
                             "CUDA_VISIBLE_DEVICES, or use --device auto / cpu")
        raise UsageError(f"--device {requested}: torch sees no {requested} device here "
                         f"(its accelerator: {found[0] if found else 'none'}); use --device "
                         "auto / cpu")
    if requested == "mps":  # (one device, no index)
        return "mps"
    return f"{requested}:{int(local_rank) % found[1]}"
