"""A plain PyTorch script ported to mpi_teleport: :mod:`.plain_script` (a CNN with
BatchNorm and dropout on scikit-learn's 8x8 digits, random-shift + noise augmentation in
the Dataset, SGD with momentum and weight decay, a cosine learning rate, macro-F1 beside
accuracy, a CSV log) trained with Teleportation on n nodes, all in this process or one
node per MPI rank, with identical records::

    python -m mpi_teleport.examples.ported_script --nodes 4 --out runs/port
    mpirun -n 4 python -m mpi_teleport.examples.ported_script --mpi --out runs/port-mpi

The model, the data set (its augmentation draws from torch's generator, which the
problem keys by (seed, node, round)) and the data loading are the plain script's, line
for line. What changes: the loop becomes one ``mt.teleportation`` call; weight decay
moves into the problem; the metric becomes an :class:`mpi_teleport.EvalMetric` (sums
per batch, so it is computed the same under MPI); the log becomes a ``callback``
(CsvWriter, and TensorBoardWriter when ``tensorboard`` is installed). Code lines
(tests/test_ported_example.py counts them, docstrings and comments aside): plain script
68, this port 80 (1.18x).
"""
import argparse
import math

import numpy as np
import torch
from torch import nn

import mpi_teleport as mt


class CNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16),
                                      nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.1))
        self.head = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Digits(torch.utils.data.Dataset):
    def __init__(self, x, y, augment=False):
        self.x, self.y, self.augment = x, y, augment

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = torch.from_numpy(self.x[i])
        if self.augment:  # random shift by up to one pixel, and noise
            shift = torch.randint(-1, 2, (2,)).tolist()
            x = torch.roll(x, shifts=shift, dims=(1, 2)) + 0.05 * torch.randn_like(x)
        return x, int(self.y[i])


def load(seed=0):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images[:, None] / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(x))
    train, test = order[:1400], order[1400:]
    return (x[train], digits.target[train]), (x[test], digits.target[test])


class MacroF1(mt.EvalMetric):
    name, size, higher_is_better = "macro_f1", 30, True

    def sums(self, output, target):  # per class: true positives, predicted, actual
        pred = output.argmax(1)
        return torch.cat([torch.bincount(target[pred == target], minlength=10),
                          torch.bincount(pred, minlength=10), torch.bincount(target, minlength=10)])

    def value(self, totals, count):
        tp, pred, true = np.split(totals, 3)
        return float(np.mean(2 * tp / np.maximum(pred + true, 1)))


def problem(nodes, seed=0, local_nodes=None):
    """Also a factory: ``--problem mpi_teleport.examples.ported_script:problem``."""
    train, test = load()
    return mt.TorchProblem(CNN, Digits(*train, augment=True), test=Digits(*test), nodes=nodes,
                           seed=seed, partition="iid", batch_size=32, weight_decay=5e-4,
                           metrics=[MacroF1()], local_nodes=local_nodes)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--mpi", action="store_true")
    parser.add_argument("--out", default="runs/port")
    args = parser.parse_args(argv)
    comm = None
    if args.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        args.nodes = comm.Get_size()
    p = problem(args.nodes, local_nodes=None if comm is None else [comm.Get_rank()])
    rounds = math.ceil(args.epochs * p.n_train / (32 * args.k))
    writers = [mt.CsvWriter(f"{args.out}/log.csv")]
    try:
        writers.append(mt.TensorBoardWriter(f"{args.out}/tensorboard"))
    except ImportError:
        pass  # (pip install tensorboard for the TensorBoard log)

    def log(record):  # on the root, after each logged round
        for writer in writers:
            writer(record)
    result = mt.teleportation(p, nodes=args.nodes, k=args.k, rounds=rounds, momentum=0.9,
                              lr=lambda t: 0.05 * (1 + math.cos(math.pi * t / rounds)),
                              records=mt.Records(log_every=rounds // args.epochs, callback=log),
                              comm=comm, out=args.out)
    if comm is None or comm.Get_rank() == 0:
        for record in result.records:
            print(f"round {record['round']}: loss {record['loss']:.4f} "
                  f"accuracy {record['accuracy']:.4f} macro-F1 {record['macro_f1']:.4f}")
    return 0


if __name__ == "__main__":
    main()
