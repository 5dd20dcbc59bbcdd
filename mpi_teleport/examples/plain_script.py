"""The plain PyTorch script that :mod:`mpi_teleport.examples.ported_script` ports: one
process, one model, the usual loop (a CNN with BatchNorm and dropout on scikit-learn's
8x8 digits, random-shift + noise augmentation in the Dataset, SGD with momentum and
weight decay, a cosine learning rate, macro-F1 beside accuracy, a CSV log)::

    python -m mpi_teleport.examples.plain_script --epochs 3 --csv plain.csv

It is here for comparison: the port keeps the model, the data set and the metric, and
replaces the loop (tests/test_ported_example.py counts both files' code lines).
"""
import argparse
import csv
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


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


def macro_f1(pred, target, classes=10):
    tp = torch.bincount(target[pred == target], minlength=classes).double()
    size = torch.bincount(pred, minlength=classes) + torch.bincount(target, minlength=classes)
    return float((2 * tp / size.clamp(min=1)).mean())


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--csv", default="plain.csv")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    train, test = load()
    model = CNN()
    loader = torch.utils.data.DataLoader(Digits(*train, augment=True), batch_size=32,
                                         shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs * len(loader))
    with open(args.csv, "w", newline="") as f:
        log = csv.writer(f)
        log.writerow(["epoch", "loss", "accuracy", "macro_f1"])
        for epoch in range(args.epochs):
            model.train()
            for xb, yb in loader:
                opt.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                opt.step()
                sched.step()
            model.eval()
            with torch.no_grad():
                out, yt = model(torch.from_numpy(test[0])), torch.from_numpy(test[1])
            loss = float(F.cross_entropy(out, yt))
            acc = float((out.argmax(1) == yt).float().mean())
            log.writerow([epoch + 1, loss, acc, macro_f1(out.argmax(1), yt)])
            print(f"epoch {epoch + 1}: loss {loss:.4f} accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
