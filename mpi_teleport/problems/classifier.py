"""One classification problem built from a model name and its data: the shared step of the
built-in factories (:mod:`.network`) and of the authors' recipe (:mod:`.authors_recipe`),
kept apart so neither imports the other."""
from __future__ import annotations


def classifier(model_name: str, train, test, nodes: int, seed: int, *, alpha: float,
                batch_size: int, val_fraction: float, device, local_nodes, staged,
                evaluation_part=None, sampling: str = "replacement", partition=None,
                augment=None, problem_class=None, problem_args=None):
    """``partition``, ``augment``, ``problem_class`` (a TorchProblem subclass) and its
    ``problem_args``: the authors' recipe's choices (:mod:`.authors_recipe`)."""
    from . import models
    from .torch_problem import TorchProblem

    models.configure_torch_threads(1)  # before any torch work: bit-reproducible kernels
    cls = TorchProblem if problem_class is None else problem_class
    return cls(models.build_model(model_name, seed), train, nodes=nodes, seed=seed,
               alpha=alpha, batch_size=batch_size, sampling=sampling, test=test,
               validation_fraction=val_fraction, n_classes=10, device=device,
               local_nodes=local_nodes, staged=staged, evaluation_part=evaluation_part,
               partition=partition, augment=augment, **(problem_args or {}))
