"""The token a rank holds: its buffers, allocated once per run.

A rank holds at most one token per round: its model x and momentum v, the y its local
step writes (and sends), the buffer v_in an arriving momentum lands in, receive buffers
for the gossip inputs (grown to the most a round has needed), and the work space of the
gossip sum. Buffers never change identity during a run, only roles (an arriving model
or momentum lands in a spare buffer and the two swap), so the transport may bind
persistent channels to them (:mod:`mpi_teleport.runtime.backends.compiled`).
"""
from __future__ import annotations

import numpy as np

from ...core.algorithms import work_buffer


class TokenState:
    """Host (numpy) token buffers: ``x``, ``y``, ``v``, ``v_in`` (None without momentum),
    ``inbox`` (receive buffers) and ``work``."""

    def __init__(self, d: int, momentum: int, dtype=np.float64):
        # momentum: the state vectors the token carries (True/1: momentum; 2: Adam's moments)
        self.x = np.zeros(d, dtype)
        self.y = np.zeros(d, dtype)
        self.v = np.zeros(int(momentum) * d, dtype) if momentum else None
        self.v_in = np.zeros(int(momentum) * d, dtype) if momentum else None
        self.inbox: list[np.ndarray] = []
        self.work = work_buffer(d, dtype)  # one block of the weighted sum

    def inboxes(self, count: int) -> list[np.ndarray]:
        """The receive buffers, at least ``count`` of them."""
        while len(self.inbox) < count:
            self.inbox.append(np.zeros_like(self.x))
        return self.inbox


def new_state(d: int, momentum: bool, dtype, device=None):
    """Token buffers of d elements: numpy arrays, or with ``device`` torch tensors paired
    with the numpy arrays MPI moves (:class:`~mpi_teleport.runtime.backends.device.DeviceTokenState`,
    the same fields)."""
    if device is None:
        return TokenState(d, momentum, dtype)
    from .device import DeviceTokenState

    return DeviceTokenState(d, momentum, dtype, device)
