"""Your own PyTorch model and data set, trained with Teleportation and ``search_k``.

The model (a small MLP with BatchNorm) and the data (scikit-learn's bundled 8x8 digits,
flattened: offline) are defined here, as a user would define them; mpi_teleport owns only
where the tokens go, how they move and how they are averaged. The same script runs all
nodes in this process or one node per MPI rank, with identical numbers::

    python -m mpi_teleport.examples.custom_model
    mpirun -n 4 python -m mpi_teleport.examples.custom_model --mpi

Both print the same table (and write the same ``metrics.jsonl`` with ``--out DIR``).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def build_model():
    """The user's model: any torch.nn.Module. Built under a fixed seed by TorchProblem,
    so every process starts from the same weights."""
    from torch import nn

    return nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))


def load_data(seed: int = 0):
    """The user's data: (X, y) train and test arrays (sklearn's digits, scaled to [0, 1])."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    return (x[train], y[train]), (x[test], y[test])


def problem(nodes: int, seed: int = 0, alpha: float = 0.5, local_nodes=None):
    """The factory: also usable as ``--problem mpi_teleport.examples.custom_model:problem``.
    Under MPI pass ``local_nodes=[rank]``: the rank then keeps only its node's share of the
    training data and its slice of the evaluation data."""
    import mpi_teleport as mt

    train, test = load_data()
    return mt.TorchProblem(build_model, train, test=test, nodes=nodes, seed=seed, alpha=alpha,
                           batch_size=16, validation_fraction=0.1, local_nodes=local_nodes)


class OneLineParser(argparse.ArgumentParser):
    """Bad usage in one line and exit status 2, as the package's commands answer it
    (argparse alone prints its usage block first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv=None) -> int:
    import mpi_teleport as mt

    parser = OneLineParser(prog="python -m mpi_teleport.examples.custom_model",  # (bad usage: one line)
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8, help="nodes (with --mpi: the ranks)")
    parser.add_argument("--mpi", action="store_true", help="one node per MPI rank")
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--out", default=None, help="write the Teleportation run's files here")
    args = parser.parse_args(argv)
    comm = None
    if args.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        args.nodes = comm.Get_size()
    p = problem(args.nodes, local_nodes=None if comm is None else [comm.Get_rank()])
    common = dict(nodes=args.nodes, rounds=args.rounds, lr=0.1, momentum=0.9, comm=comm,
                  records=mt.Records(log_every=50))
    tele = mt.teleportation(p, k=2, out=args.out, **common)
    dsgd = mt.dsgd(p, **common)
    found = mt.search_k(p, **{**common, "rounds": args.rounds // 2})
    if comm is None or comm.Get_rank() == 0:
        print(f"Teleportation (k=2): test accuracy {tele.summary['final_accuracy']:.4f}")
        print(f"DSGD (ring):         test accuracy {dsgd.summary['final_accuracy']:.4f}")
        chosen = ", ".join(f"k={k}: {v:.4f}" for k, v in found.candidates.items())
        print(f"search_k chose k={found.k} (validation accuracy {chosen})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
