"""Global random generators keyed by (seed, node, t) while a row's gradient is computed.

A user's data set transform or model may draw from torch's, numpy's or Python's global
generator (``torch.rand``, ``np.random.rand``, ``random.random``: the usual way to write
data augmentation and dropout). :class:`KeyedGlobals` makes those draws a pure function
of (seed, node, t) -- mpi_teleport/DESIGN.md §3.1 -- so an MPI rank and the simulator
draw the same numbers, two runs with one seed are equal, and round t + 1 draws new
numbers: inside ``with KeyedGlobals(...) as keyed``, ``keyed.seed(node, t)`` seeds every
generator in scope before the row's batch is read; on exit the generators are as they
were (the caller's random state is untouched).

numpy's and Python's generators are keyed only when asked (``python_and_numpy``): the
training set is a ``Dataset`` whose items are read one by one (arrays draw nothing), since
seeding numpy's legacy generator costs about 15 us a row.
"""
from __future__ import annotations

import random
from typing import cast

import numpy as np

from ..core import rng

__all__ = ["KeyedGlobals", "augment_generator"]


class KeyedGlobals:
    """Context manager: torch's default generators (``generators``: the CPU one, and the
    GPU's when the model is there), and with ``python_and_numpy`` numpy's legacy global
    generator and Python's ``random``, seeded per row from (seed, node, t); restored on exit."""

    def __init__(self, seed: int, generators, python_and_numpy: bool):
        self.base, self.generators, self.others = int(seed), list(generators), python_and_numpy
        self._saved: list | None = None  # the generators' states while in scope

    def __enter__(self) -> "KeyedGlobals":
        saved = [g.get_state() for g in self.generators]
        if self.others:
            saved += [np.random.get_state(), random.getstate()]
        self._saved = saved
        return self

    def seed(self, node: int, t: int) -> None:
        """Key every generator in scope by (seed, node, t): streams apart, so torch's,
        numpy's and Python's draws are unrelated."""
        torch_key = rng.key(self.base, rng.STREAM_TORCH, t, node)
        for gen in self.generators:  # (torch.manual_seed: ~0.2 ms, every back end)
            gen.manual_seed(torch_key)
        if self.others:
            k = rng.key(self.base, rng.STREAM_GLOBALS, t, node)
            np.random.seed([k & 0xFFFFFFFF, k >> 32])
            random.seed(k)

    def seed_chunk(self, split: str, start: int) -> None:
        """Key the generators for the evaluation chunk starting at sample ``start`` of a
        set: a test Dataset that draws (augmentation left on) gives the same numbers
        whichever rank evaluates the chunk."""
        k = rng.key(self.base, rng.STREAM_EVAL_CHUNK, int(split == "validation"), start)
        for gen in self.generators:
            gen.manual_seed(k)
        if self.others:
            np.random.seed([k & 0xFFFFFFFF, k >> 32])
            random.seed(k)

    def __exit__(self, *exc) -> None:
        # (always after __enter__, which set it)
        saved, self._saved = cast(list, self._saved), None
        for gen, state in zip(self.generators, saved):
            gen.set_state(state)
        if self.others:
            np.random.set_state(saved[-2])
            random.setstate(saved[-1])


def augment_generator(generator, seed: int, node: int, t: int):
    """``generator`` (a CPU ``torch.Generator``) seeded from (seed, node, t) on its own
    stream: what an ``augment`` hook receives for node's batch of round t."""
    generator.manual_seed(rng.key(int(seed), rng.STREAM_AUGMENT, t, node))
    return generator
