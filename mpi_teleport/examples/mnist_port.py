"""The official PyTorch MNIST example (``Net``: two convolutions, dropout, two linear
layers; ``log_interval`` training-loss lines; a test pass after every epoch; ``StepLR``
with gamma 0.7 each epoch) ported to Teleportation, as the porting tutorial
(docs/tutorials/pytorch-script.md) walks through it. Offline, on scikit-learn's 8x8 digits standing in for MNIST (the
layers are sized for 8x8 inputs; give your own 28x28 data set to ``problem``)::

    python -m mpi_teleport.examples.mnist_port --nodes 4 --k 2 --epochs 3
    python -m mpi_teleport.launch -n 4 -m mpi_teleport.examples.mnist_port --mpi --epochs 3

The optimizer (the official example's Adadelta, whose state travels with the tokens) and
the scheduler are built as the plain script builds them and handed over; the scheduler
steps once per epoch. Every record carries the latest training loss; the test
set is evaluated once per epoch; the progress bar shows the training loss every round.
"""
import argparse

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import mpi_teleport as mt


class Net(nn.Module):  # the official example's, for 8x8 inputs
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64 * 2 * 2, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(torch.flatten(F.max_pool2d(x, 2), 1))
        x = self.dropout2(F.relu(self.fc1(x)))
        return self.fc2(x)  # logits: the default loss is cross-entropy


def load(seed=0):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = ((digits.images[:, None] / 16.0 - 0.5) / 0.5).astype(np.float32)  # (Normalize)
    order = np.random.default_rng(seed).permutation(len(x))
    train, test = order[:1400], order[1400:]
    return (x[train], digits.target[train]), (x[test], digits.target[test])


def problem(nodes, seed=0, local_nodes=None):
    """Also a factory: ``--problem mpi_teleport.examples.mnist_port:problem``."""
    train, test = load()
    return mt.TorchProblem(Net, train, test=test, nodes=nodes, seed=seed, batch_size=64,
                           sampling="epochs", local_nodes=local_nodes)  # (shuffle=True)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--mpi", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    comm = None
    if args.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        args.nodes = comm.Get_size()
    p = problem(args.nodes, local_nodes=None if comm is None else [comm.Get_rank()])
    optimizer = torch.optim.Adadelta(Net().parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    result = mt.teleportation(p, nodes=args.nodes, k=args.k, epochs=args.epochs,
                              optimizer=optimizer, lr=scheduler, lr_step="epoch",
                              log_every=10, eval_every_epochs=1, progress=args.progress,
                              comm=comm, out=args.out)
    if comm is None or comm.Get_rank() == 0:
        for r in result.records:
            test = (f"  test loss {r['loss']:.4f} accuracy {r['accuracy']:.4f}"
                    if "accuracy" in r else "")
            train = f"train loss {r['train_loss']:.4f}" if "train_loss" in r else "start"
            print(f"round {r['round']:4d}: {train}{test}")
    return 0


if __name__ == "__main__":
    main()
