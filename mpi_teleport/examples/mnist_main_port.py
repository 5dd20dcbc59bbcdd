"""pytorch/examples' ``mnist/main.py``, ported: the same network (two 3x3 convolutions,
max pooling, dropout, two linear layers, log-softmax and the negative log-likelihood),
Adadelta with ``StepLR(step_size=1, gamma)`` stepped each epoch, MNIST normalised with
mean 0.1307 and deviation 0.3081, and the same flags (``--batch-size``,
``--test-batch-size``, ``--epochs``, ``--lr``, ``--gamma``, ``--no-accel``, ``--dry-run``,
``--seed``, ``--log-interval``, ``--save-model``) in its own ``argparse`` parser, with the
package's flags beside them (``mt.add_arguments``: ``--k``, ``--topology``, ``--out``,
``--checkpoint-every``, ``--resume auto``, ``--optimizer``, ``--lr-scheduler``, ...; its
``--lr``, ``--epochs``, ``--batch-size`` and ``--seed`` are the run's). Adadelta and
StepLR are handed by keyword, as the original builds them, unless the command line names
others (``--optimizer adadelta --optimizer-args rho=0.95 --lr-scheduler StepLR
--lr-scheduler-args step_size=1,gamma=0.7``). The loops become one call; Adadelta's
state travels with the tokens. Alone or under a launcher, unchanged::

    python mnist_main_port.py --epochs 2
    python -m mpi_teleport.launch -n 4 mnist_main_port.py --epochs 2 --topology exp

``--fake-data N``: N generated images instead of downloading MNIST (tests/test_ports.py).
"""
import argparse
import functools

import torch
from torch import nn
from torch.nn import functional as F
from torchvision import datasets, transforms

import mpi_teleport as mt


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = self.dropout1(torch.flatten(x, 1))
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def data(fake: int = 0):
    transform = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((0.1307,), (0.3081,))])
    if fake:  # generated images, the same in every process
        return (datasets.FakeData(fake, (1, 28, 28), 10, transform=transform),
                datasets.FakeData(max(fake // 4, 1), (1, 28, 28), 10, transform=transform,
                                  random_offset=fake))
    return (datasets.MNIST("../data", train=True, download=True, transform=transform),
            datasets.MNIST("../data", train=False, transform=transform))


def main(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example under Teleportation")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N")
    parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N")
    parser.add_argument("--epochs", type=int, default=14, metavar="N")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M")
    parser.add_argument("--no-accel", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="a single round")
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--log-interval", type=int, default=10, metavar="N",
                        help="rounds between training-loss lines")
    parser.add_argument("--save-model", action="store_true")
    parser.add_argument("--fake-data", type=int, default=0, metavar="N")
    mt.add_arguments(parser)  # the package's flags beside the script's own
    parser.set_defaults(nodes=4, k=2, algorithm="teleportation")  # (this script's defaults)
    args = parser.parse_args(argv)

    train, test = data(args.fake_data)
    problem = mt.TorchProblem(Net, train, test=test, nodes=args.nodes, seed=args.seed,
                              loss=F.nll_loss, batch_size=args.batch_size, sampling="epochs",
                              eval_batch_size=args.test_batch_size,
                              device="cpu" if args.no_accel else "auto", local_nodes="auto")
    by_keyword = {}  # Adadelta and StepLR as the original builds them, unless named
    if not hasattr(args, "optimizer"):
        by_keyword["optimizer"] = functools.partial(torch.optim.Adadelta, lr=args.lr)
    if not hasattr(args, "lr_scheduler"):
        by_keyword["lr"] = functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1,
                                             gamma=args.gamma)
    span = dict(rounds=1, epochs=None) if args.dry_run else {}
    settings = mt.RunSettings.from_namespace(
        args, problem=problem, comm="auto", log_every=args.log_interval,
        eval_every_epochs=1, **span, **by_keyword)
    result = mt.train(problem, settings, "auto")
    if mt.on_root():  # (print and save once)
        drawn = args.batch_size * settings.spec.tokens  # samples a round
        for r in result.records[1:]:
            if "train_loss" in r:
                done = r["epoch_step"] * drawn
                print(f"Train Epoch: {r['train_epoch']} [{done}/{problem.n_train} "
                      f"({100 * done / problem.n_train:.0f}%)]\tLoss: {r['train_loss']:.6f}")
            if r["epoch_end"] and "accuracy" in r:
                print(f"\nTest set: Average loss: {r['loss']:.4f}, Accuracy: "
                      f"{100 * r['accuracy']:.0f}%\n")
        if args.save_model:
            torch.save(problem.module(result.x).state_dict(), "mnist_cnn.pt")
    return 0


if __name__ == "__main__":
    main()
