"""A numpy problem of your own: L2-regularised logistic regression, data split over nodes.

Node i holds its own slice of a synthetic data set whose class balance differs from
node to node (heterogeneous data). A token is the weight vector; node i's stochastic
gradient uses a mini-batch drawn with a generator keyed by (seed, node, round), so every
back end (the simulator, any number of MPI ranks) computes the same numbers.

Run it, in this process and under MPI::

    python -m mpi_teleport.examples.logistic
    mpirun -n 8 python -m mpi_teleport.examples.logistic --mpi

or through the command line, with this module's factory::

    python -m mpi_teleport.sim --nodes 8 --problem mpi_teleport.examples.logistic:problem \\
        --algorithm compare --k 2 --lr 0.5 --rounds 300 --target 0.3
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np


class LogisticRegression:
    """The :class:`mpi_teleport.Problem` protocol in numpy alone.

    Parameters
    ----------
    nodes : int
        Number of nodes n; node i holds ``samples_per_node`` samples.
    dim : int
        Features per sample (the token has ``dim`` weights).
    seed : int
        Keys the data and every mini-batch.
    batch_size, reg
        Mini-batch size per step and the L2 weight.
    """

    metric = "loss"  # the training loss of the averaged model; smaller is better
    higher_is_better = False
    dtype = np.float64
    name = "logistic"

    def __init__(self, nodes: int, dim: int = 10, seed: int = 0, samples_per_node: int = 64,
                 batch_size: int = 8, reg: float = 1e-3):
        self.n, self.dim, self.seed = nodes, dim, seed
        self.batch_size, self.reg = batch_size, reg
        data = np.random.default_rng([seed, 1])  # the data: same in every process
        w_true = data.normal(size=dim)
        self.features = data.normal(size=(nodes, samples_per_node, dim))
        shift = np.linspace(-2.0, 2.0, nodes)[:, None]  # node-dependent class balance
        logits = self.features @ w_true + shift
        self.labels = (data.random(logits.shape) < 1 / (1 + np.exp(-logits))).astype(np.float64)

    def initial(self) -> np.ndarray:
        return np.zeros(self.dim)

    def _loss_grad(self, w: np.ndarray, a: np.ndarray, b: np.ndarray):
        z = a @ w
        p = 1 / (1 + np.exp(-z))
        loss = np.mean(np.logaddexp(0.0, z) - b * z) + 0.5 * self.reg * w @ w
        return loss, a.T @ (p - b) / len(b) + self.reg * w

    def gradient(self, nodes, x, t, out=None):
        out = np.empty_like(x) if out is None else out
        for r, node in enumerate(np.atleast_1d(nodes)):
            batch = np.random.default_rng([self.seed, 2, int(node), t])  # keyed (seed, node, t)
            idx = batch.integers(0, self.features.shape[1], self.batch_size)
            out[r] = self._loss_grad(x[r], self.features[node, idx], self.labels[node, idx])[1]
        return out

    def evaluate(self, x: np.ndarray) -> dict:
        """Full training loss of the averaged model, and the tokens' spread."""
        w = x.mean(axis=0)
        a = self.features.reshape(-1, self.dim)
        loss = self._loss_grad(w, a, self.labels.reshape(-1))[0]
        centred = x - w
        return {"loss": float(loss), "consensus": float(np.sum(centred * centred) / len(x))}


def problem(nodes: int, seed: int) -> LogisticRegression:
    """The factory for ``--problem mpi_teleport.examples.logistic:problem``."""
    return LogisticRegression(nodes, seed=seed)


class OneLineParser(argparse.ArgumentParser):
    """Bad usage in one line and exit status 2, as the package's commands answer it
    (argparse alone prints its usage block first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv=None) -> int:
    import mpi_teleport as mt

    parser = OneLineParser(prog="python -m mpi_teleport.examples.logistic",  # (bad usage: one line)
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8, help="nodes (with --mpi: the ranks)")
    parser.add_argument("--mpi", action="store_true", help="one node per MPI rank")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    comm = None
    if args.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        args.nodes = comm.Get_size()
    p = LogisticRegression(args.nodes)
    tele = mt.teleportation(p, nodes=args.nodes, k=2, rounds=args.rounds, lr=0.5, comm=comm)
    dsgd = mt.dsgd(p, nodes=args.nodes, rounds=args.rounds, lr=0.5, comm=comm)
    found = mt.search_k(p, nodes=args.nodes, rounds=args.rounds // 2, lr=0.5, comm=comm)
    if comm is None or comm.Get_rank() == 0:
        print(f"Teleportation (k=2): final loss {tele.summary['final_loss']:.6f}")
        print(f"DSGD (ring):         final loss {dsgd.summary['final_loss']:.6f}")
        print(f"search_k: chose k={found.k} from {found.candidates}")
        assert math.isfinite(tele.summary["final_loss"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
