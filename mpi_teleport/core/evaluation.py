"""Evaluation of the averaged model shared by the processes of a run.

A problem that offers chunked evaluation (``evaluation_sums``, ``metrics_from_sums``,
``eval_batch_size``, ``n_test``/``n_validation``; :class:`~mpi_teleport.problem.Problem`)
is evaluated by every MPI rank on its own chunk-aligned slice (:func:`chunk_slices`); the
per-chunk rows, concatenated in rank order (= chunk order), give the same numbers as one
process evaluating the whole set, bit for bit, whatever the number of ranks. This module
is pure (no MPI, no torch): the MPI back end moves the vectors, the engine asks for
the validation only on the rounds the recorder uses it (:class:`Evaluations`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

SPLITS = ("test", "validation")


@dataclass
class Evaluations:
    """What the recorder gets with a logging round's token matrices (root only).

    ``metrics[q]``: ``problem.evaluate`` of run q's matrix; ``validation[q]``:
    ``problem.validate`` of it, or None on rounds where it is not asked for;
    ``token_validation[q][m]``: ``problem.validate`` of token m alone (Algorithm 2's
    ``tokens`` criterion), or None."""

    metrics: list[dict[str, Any]]
    validation: list[float] | None = None
    token_validation: list[list[float]] | None = None


def chunk_slices(n_samples: int, chunk: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(n_samples)`` into ``parts`` contiguous ``(lo, hi)`` slices whose
    boundaries are multiples of ``chunk`` (or ``n_samples``), as even as whole chunks
    allow; the first slices get the extra chunks, later ones may be empty.

    >>> chunk_slices(2500, 1000, 2)
    [(0, 2000), (2000, 2500)]
    >>> chunk_slices(10, 4, 4)
    [(0, 4), (4, 8), (8, 10), (10, 10)]
    """
    n_samples, chunk, parts = int(n_samples), int(chunk), int(parts)
    if n_samples < 0 or chunk < 1 or parts < 1:
        raise ValueError(f"chunk_slices needs n_samples >= 0, chunk >= 1, parts >= 1; got "
                         f"{n_samples}, {chunk}, {parts}")
    n_chunks = -(-n_samples // chunk)
    per, extra = divmod(n_chunks, parts)
    out, c = [], 0
    for r in range(parts):
        m = per + (r < extra)
        out.append((min(c * chunk, n_samples), min((c + m) * chunk, n_samples)))
        c += m
    return out


def is_shared(problem: Any, split: str = "test") -> bool:
    """Whether ``problem`` offers chunked evaluation of a non-empty ``split`` (else one
    process evaluates it, as ``evaluate``/``validate`` do)."""
    from ..problem import with_defaults

    if not with_defaults(problem).shares_evaluation:  # (declared: Problem's optional members)
        return False
    return set_size(problem, split) > 0


def set_size(problem: Any, split: str) -> int:
    """Samples of the evaluated set: ``n_test`` or ``n_validation``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return int(problem.n_test if split == "test" else problem.n_validation)


def part(problem: Any, split: str, rank: int, size: int) -> tuple[int, int]:
    """Rank ``rank`` of ``size``'s slice ``(lo, hi)`` of the set."""
    return chunk_slices(set_size(problem, split), problem.eval_batch_size, size)[rank]


def result(problem: Any, rows: Any, x: np.ndarray | None, split: str) -> Any:
    """The problem's answer from all chunk rows of a set: ``evaluate``'s metrics dict
    (consensus from the token matrix ``x``) for "test", ``validate``'s number for
    "validation" (Any: what the problem's ``metrics_from_sums`` returns)."""
    if split == "test":
        return problem.metrics_from_sums(rows, x)
    return problem.metrics_from_sums(rows)[problem.metric]
