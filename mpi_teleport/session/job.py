"""The runs a job asks for: one algorithm, or both for the command lines' ``compare``
(Teleportation, then DSGD), and where each writes its files and its checkpoints. A
training function and a script's ``RunSettings.from_args`` are always one run."""
from __future__ import annotations

from pathlib import Path

def runs_requested(cfg) -> list[tuple[str, int | str]]:
    """[(algorithm, k)] for a job's values: compare means Teleportation then DSGD."""
    tele = ("teleportation", cfg.k)
    dsgd = ("dsgd", cfg.nodes)
    return {"teleportation": [tele], "dsgd": [dsgd], "compare": [tele, dsgd]}[cfg.algorithm]

def out_dir(cfg, algorithm: str) -> Path | None:
    if cfg.out is None:
        return None
    return Path(cfg.out) / algorithm if cfg.algorithm == "compare" else Path(cfg.out)

def leg_dir(cfg, algorithm: str) -> Path | None:
    """Where the checkpoints of one run of a job (one algorithm of ``compare``) go,
    or None."""
    if cfg.checkpoint_dir is not None:
        base = Path(cfg.checkpoint_dir)
        return base / algorithm if cfg.algorithm == "compare" else base
    out = out_dir(cfg, algorithm)
    return None if out is None else out / "checkpoints"
