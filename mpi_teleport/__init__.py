"""mpi_teleport: the reference MPI implementation of Teleportation (Takezawa & Stich,
ICLR 2025) and its Decentralized-SGD baselines, with a single-process simulator.

Bring your own problem (a :class:`Problem` in numpy, or a PyTorch model wrapped by
:class:`TorchProblem`) and train it with :func:`teleportation`, :func:`dsgd` or choose k
with :func:`search_k`, all nodes in this process (``comm=None``) or one node per MPI rank
(``comm=MPI.COMM_WORLD``), with bit-identical records either way. Options come as flat keywords (``target=0.01``) or
grouped in :class:`Records`, :class:`Checkpoints` and :class:`Latency`
(``records=mt.Records(target=0.01)``). Each of these functions builds the run's
:class:`RunSettings` (validated once) and calls :func:`train`, the one run function, as
``python -m mpi_teleport.sim`` and ``mpirun ... python -m mpi_teleport.run`` do;
:meth:`RunSettings.from_keywords` gives a call's settings without running it. The
internals benchmarks measure are named in :mod:`mpi_teleport.measure`.

>>> import mpi_teleport as mt
>>> from mpi_teleport.problems.quadratic import Quadratic
>>> mt.teleportation(Quadratic(n=10, d=4), nodes=10, k=2, rounds=20, lr=0.05).k
2
"""
import typing as _typing  # (private: no public name is added to the package)

from .api import RunSettings, dsgd, search_k, teleportation, train
from .runtime.engine import Result
from .errors import NonFiniteError, OutputError, UsageError
from .disk.loggers import CsvWriter, TensorBoardWriter
from .session.settings import Checkpoints, Latency, Records
from .session.script import add_arguments
from .problem import Problem
from .core.schedulers import rounds_per_epoch
from .runtime.launched import on_root
from .runtime.signals import Stopped

from ._version import __version__

__all__ = ["teleportation", "dsgd", "search_k", "train", "RunSettings", "Problem",
           "TorchProblem", "EvalMetric",
           "Result", "UsageError", "NonFiniteError", "OutputError", "CsvWriter",
           "TensorBoardWriter", "Records", "Checkpoints", "Latency", "rounds_per_epoch",
           "on_root", "Stopped", "add_arguments"]

_TORCH_NAMES = ("TorchProblem", "EvalMetric")


def __getattr__(name: str) -> _typing.Any:
    if name in _TORCH_NAMES:  # torch is imported only when asked for
        from .problems import torch_problem

        return getattr(torch_problem, name)
    raise AttributeError(f"module 'mpi_teleport' has no attribute {name!r}")
