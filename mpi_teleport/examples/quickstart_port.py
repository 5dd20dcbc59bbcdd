"""The PyTorch tutorials' quickstart, ported: Fashion-MNIST through torchvision, a
three-layer perceptron (784 -> 512 -> 512 -> 10 with ReLU), cross-entropy, SGD with step
size 1e-3, batches of 64, five epochs, the test set after each epoch, the model saved to
``model.pth`` at the end. The loop, the optimizer and the test pass become one call; the
same file runs alone (the simulator: every node in this process) and under a launcher
(one node per rank), unchanged::

    python quickstart_port.py
    python -m mpi_teleport.launch -n 4 quickstart_port.py

``--fake-data N`` trains on N generated images (torchvision's FakeData) instead of
downloading Fashion-MNIST (the test suite's way; tests/test_ports.py).
"""
import argparse
import functools

import torch
from torch import nn
from torchvision import datasets
from torchvision.transforms import ToTensor

import mpi_teleport as mt


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 512), nn.ReLU(),
            nn.Linear(512, 512), nn.ReLU(),
            nn.Linear(512, 10))

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


def data(fake: int = 0):
    if fake:  # generated images, the same in every process
        return (datasets.FakeData(fake, (1, 28, 28), 10, transform=ToTensor()),
                datasets.FakeData(max(fake // 4, 1), (1, 28, 28), 10, transform=ToTensor(),
                                  random_offset=fake))
    return (datasets.FashionMNIST(root="data", train=True, download=True, transform=ToTensor()),
            datasets.FashionMNIST(root="data", train=False, download=True, transform=ToTensor()))


def main(argv=None):
    parser = argparse.ArgumentParser(description="The PyTorch quickstart under Teleportation")
    parser.add_argument("--nodes", type=int, default=4, help="nodes (under a launcher: ranks)")
    parser.add_argument("--k", type=int, default=2, help="active nodes (tokens)")
    parser.add_argument("--epochs", type=float, default=5)
    parser.add_argument("--fake-data", type=int, default=0, metavar="N")
    parser.add_argument("--save", default="model.pth")
    args = parser.parse_args(argv)

    training_data, test_data = data(args.fake_data)
    problem = mt.TorchProblem(NeuralNetwork, training_data, test=test_data, nodes=args.nodes,
                              batch_size=64, sampling="epochs", local_nodes="auto")
    result = mt.teleportation(problem, nodes=args.nodes, k=args.k, epochs=args.epochs,
                              optimizer=functools.partial(torch.optim.SGD, lr=1e-3),
                              eval_every_epochs=1, log_every=100, comm="auto")
    if mt.on_root():  # (print and save once)
        for record in result.records:
            if "accuracy" in record:
                print(f"round {record['round']}: Accuracy: {100 * record['accuracy']:>0.1f}%, "
                      f"Avg loss: {record['loss']:>8f}")
        torch.save(problem.module(result.x).state_dict(), args.save)
        print(f"Saved PyTorch Model State to {args.save}")
    return 0


if __name__ == "__main__":
    main()
