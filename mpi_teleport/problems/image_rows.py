"""Images read from uint8 storage when indexed: :class:`ImageRows` (a memory-mapped
data set whose rows a rank reads only for the samples it holds) and the per-channel
normalisation. numpy only; :mod:`.datasets` re-exports :class:`ImageRows`.
"""
from __future__ import annotations

from typing import Any, cast

import numpy as np

__all__ = ["ImageRows"]


def _normalise(images_u8: np.ndarray, mean, std) -> np.ndarray:
    """uint8 (N, C, H, W) -> float32 (x / 255 - mean) / std per channel."""
    x = images_u8.astype(np.float32)
    x *= np.float32(1.0 / 255.0)
    m = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    x -= m
    x /= s
    return x


class ImageRows:
    """Normalised float32 images ``(N, C, H, W)``, read from uint8 storage when indexed.

    The storage is a memory map of the data set's file (nothing read until asked) or an
    in-memory uint8 copy of some rows. Indexing (an int, a slice or an index array)
    returns the rows normalised as :func:`_normalise` does the whole set, element by
    element the same numbers. :meth:`select` narrows the rows without reading anything;
    :meth:`keep` copies the selected rows into memory (uint8, a quarter of float32) and
    drops the reference to the file: what a rank keeps of a set it needs only part of.
    ``file=(path, offset)``: where ``raw``'s rows lie in a file (C order, from
    ``offset``); :meth:`keep` then reads them through the file in bounded blocks instead
    of the memory map (the pages a memory map touches count in the process's resident
    memory while it is mapped: a share scattered over the whole file touches all of it).
    """

    dtype = np.dtype(np.float32)
    ndim = 4

    def __init__(self, raw: np.ndarray, mean, std, index: np.ndarray | None = None,
                 file: tuple[str, int] | None = None):
        self.raw, self.mean, self.std = raw, tuple(mean), tuple(std)
        self.index = None if index is None else np.asarray(index, dtype=np.int64)
        self.file = file

    def __len__(self) -> int:
        return len(self.raw) if self.index is None else len(self.index)

    @property
    def shape(self) -> tuple:
        return (len(self), *self.raw.shape[1:])

    def _positions(self, idx):
        if self.index is None:
            return idx
        return self.index[idx]

    def __getitem__(self, idx) -> np.ndarray:
        rows = self.raw[self._positions(idx)]
        single = rows.ndim == self.raw.ndim - 1
        out = _normalise(rows[None] if single else rows, self.mean, self.std)
        return out[0] if single else out

    def select(self, idx) -> "ImageRows":
        """These rows (an index array or a slice of this set), nothing read."""
        if isinstance(idx, slice):
            idx = np.arange(len(self))[idx]
        return ImageRows(self.raw, self.mean, self.std, self._positions(np.asarray(idx, np.int64)),
                         self.file)

    def keep(self, idx) -> "ImageRows":
        """These rows copied into memory (uint8); the file is no longer referenced."""
        if isinstance(idx, slice):
            idx = np.arange(len(self))[idx]
        positions = self._positions(np.asarray(idx, np.int64))
        if self.file is not None:
            return ImageRows(_read_rows(*self.file, self.raw.shape, positions), self.mean, self.std)
        return ImageRows(np.array(self.raw[positions], dtype=np.uint8), self.mean, self.std)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (a memory map's are the file's, not counted)."""
        held = 0 if isinstance(self.raw, np.memmap) or isinstance(self.raw.base, np.memmap) \
            else self.raw.nbytes
        return held + (0 if self.index is None else self.index.nbytes)

    @property
    def mapped(self) -> bool:
        """Whether the rows are read from a file (a memory map)."""
        return isinstance(self.raw, np.memmap) or isinstance(self.raw.base, np.memmap)


def _read_rows(path: str, offset: int, shape: tuple, positions: np.ndarray,
               block_bytes: int = 1 << 22) -> np.ndarray:
    """Rows ``positions`` (any order) of a uint8 array of ``shape`` stored in C order from
    byte ``offset`` of ``path``, read in blocks of about ``block_bytes`` (blocks holding
    none of the rows are skipped), so no more than a block is held besides the result."""
    row_shape = tuple(shape[1:])
    row_bytes = int(np.prod(row_shape, dtype=np.int64))
    out = np.empty((len(positions), *row_shape), np.uint8)
    if len(positions) == 0:
        return out
    order = np.argsort(positions, kind="stable")
    wanted = positions[order]
    per_block = max(1, block_bytes // max(row_bytes, 1))
    buf = np.empty((per_block, row_bytes), np.uint8)
    flat = out.reshape(len(positions), row_bytes)
    with open(path, "rb") as f:
        i = 0
        while i < len(wanted):
            first = int(wanted[i])
            stop = min(first + per_block, int(shape[0]))
            j = int(np.searchsorted(wanted, stop, side="left"))
            f.seek(offset + first * row_bytes)
            # (cast: numpy's stubs do not declare ndarray a Buffer)
            got = f.readinto(memoryview(cast(Any, buf))[:(stop - first)].cast("B"))
            if got != (stop - first) * row_bytes:
                raise OSError(f"{path}: short read ({got} of {(stop - first) * row_bytes} bytes)")
            flat[order[i:j]] = buf[wanted[i:j] - first]
            i = j
    return out
