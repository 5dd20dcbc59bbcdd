# mypy: disable-error-code="no-any-return"
# (ProblemWithDefaults returns members of the user's problem, any object: typed Any.)
"""What a training problem is to the engine: the :class:`Problem` protocol, and
:func:`with_defaults`, which fills in the parts a problem may leave out.

A problem maps the rows of a token matrix to stochastic gradients of the holders' local
losses and reports metrics of a token matrix. It needs numpy only; torch models come
through :class:`mpi_teleport.problems.torch_problem.TorchProblem`, which implements the
same protocol. This module imports numpy alone.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Problem", "ProblemWithDefaults", "with_defaults", "higher_is_better",
           "REQUIRED_MEMBERS"]

REQUIRED_MEMBERS = ("dim", "dtype", "initial", "gradient", "evaluate")
# Chunked evaluation shared by processes (Problem.evaluation_sums): all of them, or none.
SHARED_EVALUATION = ("evaluation_sums", "metrics_from_sums", "eval_batch_size", "average",
                     "n_test", "n_validation")

# Names of metrics where larger is better (a metric named otherwise: lower is better,
# as for a loss or an error), matched as words of the lower-cased name.
HIGHER_IS_BETTER_WORDS = ("accuracy", "acc", "f1", "auc", "precision", "recall", "score",
                          "top1", "top5", "iou", "r2", "psnr", "ssim", "bleu")


@runtime_checkable
class Problem(Protocol):
    """A decentralised training problem over ``nodes`` nodes (structural type).

    Attributes
    ----------
    dim : int
        Length of a token vector (the model's state).
    dtype : numpy dtype
        Token dtype: ``np.float64`` (numpy problems) or ``np.float32`` (torch models).
        Tokens travel, are averaged and stepped in this dtype.

    Notes
    -----
    Optional members; :func:`with_defaults` supplies them when absent:

    metric : str
        The headline key of :meth:`evaluate`'s dict (e.g. ``"error"``, ``"accuracy"``):
        what the target, the summary and the progress line refer to. Default: the first
        key of the dict ``evaluate`` returns for the initial token (evaluated once).
    higher_is_better : bool
        Whether larger values of ``metric`` are better. Default: True when a word of the
        metric's name (split at ``_``, ``-``, spaces) is accuracy-like
        (:data:`HIGHER_IS_BETTER_WORDS`: accuracy, acc, f1, auc, precision, recall,
        score, ...), else False (a loss, an error).

    validate(x) -> float
        Algorithm 2's selection metric of a token matrix, on data held out from training
        (never the test set). Default: ``evaluate(x)[metric]``.
    validation : str
        Name of that metric (default: ``"validation"`` with ``validate``, else ``metric``).
    validation_higher_is_better : bool
        Default: ``higher_is_better``.
    validation_unavailable : str or None
        Why ``validate`` cannot work for this problem, as a hint saying what to pass (a
        TorchProblem built without a validation set), or None (default). Algorithm 2
        refuses such a problem at its start in one line, rather than failing at its first
        logging round.
    n_train : int
        Training samples over all nodes (turns epochs into rounds, with ``batch_size``,
        the samples a node draws per round). Default: None.
    nodes : int
        The number of nodes the problem was built for; when present, the API refuses a
        call with another ``nodes``.
    after_step(nodes, y) -> None
        Called right after the local step ``y = x - lr * v`` with the rows of the last
        :meth:`gradient` call, before ``y`` is sent: lets a problem write state that is
        not trained by gradients (BatchNorm running statistics the forward pass updated)
        into the token rows. Default: nothing.
    prepare(nodes, t) -> iterator or None
        The part of round t's :meth:`gradient` at ``nodes`` that does not depend on x
        (random draws, a next batch), started early: a rank calls it while it waits for
        the previous round's messages and advances the iterator between tests of its
        requests, one step per ``next`` (keep a step to about a millisecond), stopping
        when the messages are in; ``gradient(nodes, x, t)`` must then finish what is left
        and give exactly the numbers it gives without ``prepare``. Only for the next
        round of a rank that will step in it; may go unused (a run that stops). Default:
        None (nothing prepared). :class:`~mpi_teleport.problems.quadratic.Quadratic`
        draws its gradient noise this way.
    gradient_columns(nodes, x, t, columns, out) -> None
        For a gradient that is element-wise (column j of the gradient reads only column j
        of x): columns ``columns`` (a slice) of ``gradient(nodes, x, t)`` written into
        ``out[:, columns]``, reading only ``x[:, columns]``, the same numbers. A rank
        then steps a large token a block of columns at a time and sends each block while
        it computes the next (the step leaves the round's path). Called for consecutive
        blocks from column 0 to d, in order, once per round. Default: absent (the step
        is computed whole, then sent). :class:`~mpi_teleport.problems.quadratic.Quadratic`
        has it.
    training_metrics(t) -> dict
        node -> {name: value} of the mini-batches this process computed in round t (e.g.
        ``{"train_loss": ...}``, from the forward pass the gradient made): every record
        of round r carries their mean over round r - 1's active nodes
        (:mod:`mpi_teleport.core.training`). Default: ``{}`` (no training values recorded).
    reached(metrics, target) -> bool, finite(metrics) -> bool
        Whether a target is met / the metrics are finite. Defaults: ``metrics[metric]``
        compared with ``target`` in the better direction; every number finite.
    describe() -> dict
        Extra facts for ``config.json``. Default: ``{}``.
    evaluation_sums(vector, lo, hi) -> ndarray, metrics_from_sums(sums, x) -> dict, n_test
        Evaluation shared by processes: each evaluates the averaged model on a slice of
        the test set aligned to fixed chunks, giving one row of sums per chunk; the rows
        of all slices, concatenated in order, give ``evaluate``'s metrics bit for bit
        (:class:`~mpi_teleport.problems.torch_problem.TorchProblem` has them). A problem
        without them is evaluated whole by one process.

    Examples
    --------
    A numpy problem: node i's loss is ``||x - i||^2 / 2``.

    >>> import numpy as np
    >>> from mpi_teleport.problem import Problem, with_defaults
    >>> class Mean:
    ...     dim, dtype, metric, higher_is_better = 3, np.float64, "error", False
    ...     def initial(self):
    ...         return np.zeros(3)
    ...     def gradient(self, nodes, x, t, out=None):
    ...         target = np.asarray(nodes, dtype=np.float64)[:, None]
    ...         return np.subtract(x, target, out=out)
    ...     def evaluate(self, x):
    ...         return {"error": float(np.mean((x - 1.5) ** 2))}
    >>> isinstance(Mean(), Problem)
    True
    >>> p = with_defaults(Mean())
    >>> p.validation, p.reached({"error": 0.1}, 0.5), p.n_train
    ('error', True, None)
    """

    dim: int
    dtype: Any

    def initial(self) -> np.ndarray:
        """The initial token ``x0``, shape ``(dim,)``, of ``dtype``, finite, identical in
        every process (all checked at start; under MPI the ranks compare a hash of it)."""

    def gradient(self, nodes: npt.ArrayLike, x: np.ndarray, t: int,
                 out: np.ndarray | None = None) -> np.ndarray:
        """Row r: the stochastic gradient of node ``nodes[r]``'s local loss at ``x[r]`` in
        round ``t`` (``x``: ``(len(nodes), dim)``). Randomness is keyed by (seed, node, t)
        only, so a row is the same bits whether computed alone (an MPI rank) or among k
        rows (the simulator). Written into ``out`` when given, or returned as a new
        array: the *return value* counts (a new array is checked and copied into
        ``out``), on every back end alike. Checked: at start, once, at the initial model
        (finite, shape ``(len(nodes), dim)``, the problem's dtype); every round, a
        returned array other than ``out`` (:mod:`mpi_teleport.core.contract`)."""

    def evaluate(self, x: np.ndarray) -> dict[str, Any]:
        """Metrics of a token matrix (rows are tokens in token order); must hold
        ``metric`` as a number (checked at every logging round: a one-line
        ``UsageError`` otherwise)."""


class ProblemWithDefaults:
    """A problem with every optional member of :class:`Problem` present.

    Required members are the wrapped problem's; the optional ones are its own when it
    has them, else the defaults documented on :class:`Problem`. Nothing else is
    forwarded: every member the package reads is declared here, and anything else of
    the user's problem is reached through :attr:`problem` (e.g. ``p.problem.module(x)``).
    Build it with :func:`with_defaults`.
    """

    def __init__(self, problem: Any) -> None:
        self.problem = problem

    # -- required: straight from the problem
    @property
    def dim(self) -> int:
        return int(self.problem.dim)

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.problem.dtype)

    @property
    def metric(self) -> str:
        if self._has("metric"):
            return self.problem.metric
        if "_metric" not in self.__dict__:  # the first key evaluate() returns, found once
            keys = list(self.problem.evaluate(self.problem.initial()[None]))
            if not keys:
                raise TypeError(f"{type(self.problem).__name__}.evaluate returned no metrics")
            self.__dict__["_metric"] = keys[0]
        return self.__dict__["_metric"]

    @property
    def higher_is_better(self) -> bool:
        if self._has("higher_is_better"):
            return bool(self.problem.higher_is_better)
        return higher_is_better(self.metric)

    def initial(self) -> np.ndarray:
        return self.problem.initial()

    def gradient(self, nodes: npt.ArrayLike, x: np.ndarray, t: int,
                 out: np.ndarray | None = None) -> np.ndarray:
        return self.problem.gradient(nodes, x, t, out=out)

    def evaluate(self, x: np.ndarray) -> dict[str, Any]:
        return self.problem.evaluate(x)

    # -- optional: the problem's own, else a default
    def _has(self, name: str) -> bool:
        return hasattr(self.problem, name)

    @property
    def validation(self) -> str:
        if self._has("validation"):
            return self.problem.validation
        return "validation" if self._has("validate") else self.metric

    @property
    def validation_higher_is_better(self) -> bool:
        if self._has("validation_higher_is_better"):
            return bool(self.problem.validation_higher_is_better)
        return self.higher_is_better

    @property
    def n_train(self) -> int | None:
        return getattr(self.problem, "n_train", None)

    @property
    def validation_unavailable(self) -> str | None:
        return getattr(self.problem, "validation_unavailable", None)

    def validate(self, x: np.ndarray) -> float:
        if self._has("validate"):
            return float(self.problem.validate(x))
        return float(self.problem.evaluate(x)[self.metric])

    def after_step(self, nodes: npt.ArrayLike, y: np.ndarray) -> None:
        if self._has("after_step"):
            self.problem.after_step(nodes, y)

    @property
    def gradient_columns(self) -> Callable[..., None] | None:
        """The problem's own ``gradient_columns`` (its element-wise gradient, a block of
        columns at a time), else None."""
        return getattr(self.problem, "gradient_columns", None)

    def prepare(self, nodes: npt.ArrayLike, t: int) -> Iterator[Any] | None:
        """The problem's own ``prepare`` (round t's x-independent work, as an iterator), if
        it has one, else None."""
        if self._has("prepare"):
            return self.problem.prepare(nodes, t)
        return None

    def training_metrics(self, t: int) -> dict[int, dict[str, float]]:
        """node -> {name: value} of round t's batches computed here (the records'
        training loss, :mod:`mpi_teleport.core.training`), else {}."""
        if self._has("training_metrics"):
            return dict(self.problem.training_metrics(t))
        return {}

    # -- optional facts, None when the problem has none
    @property
    def nodes(self) -> int | None:
        """The number of nodes the problem was built for (the API checks it)."""
        return getattr(self.problem, "nodes", None)

    @property
    def batch_size(self) -> int | None:
        """Samples a node draws per round (turns epochs into rounds)."""
        return getattr(self.problem, "batch_size", None)

    @property
    def token_device(self) -> Any:
        """Where tokens live as torch tensors (a GPU problem's device), or None: numpy."""
        return getattr(self.problem, "token_device", None)

    # -- shared evaluation (mpi_teleport.core.evaluation): all of SHARED_EVALUATION, or none
    @property
    def shares_evaluation(self) -> bool:
        """Whether the problem evaluates in chunks shared by processes."""
        return all(hasattr(self.problem, m) for m in SHARED_EVALUATION)

    def evaluation_sums(self, vector: np.ndarray, lo: int = 0, hi: int | None = None,
                        split: str = "test") -> np.ndarray:
        return self.problem.evaluation_sums(vector, lo, hi, split)

    def metrics_from_sums(self, sums: Any, x: np.ndarray | None = None) -> dict[str, Any]:
        if x is None:  # (as called without a token matrix: validation)
            return self.problem.metrics_from_sums(sums)
        return self.problem.metrics_from_sums(sums, x)

    def average(self, x: np.ndarray) -> np.ndarray:
        return self.problem.average(x)

    @property
    def eval_batch_size(self) -> int:
        return self.problem.eval_batch_size

    @property
    def n_test(self) -> int:
        return self.problem.n_test

    @property
    def n_validation(self) -> int:
        return self.problem.n_validation

    @property
    def name(self) -> str:
        """The problem's ``name`` (for summaries), else its class name."""
        return getattr(self.problem, "name", None) or type(self.problem).__name__

    def reached(self, metrics: dict[str, float], target: float | None) -> bool:
        if target is None:
            return False  # no target: nothing to reach
        if self._has("reached"):
            return bool(self.problem.reached(metrics, target))
        value = metrics[self.metric]
        return value >= target if self.higher_is_better else value <= target

    def finite(self, metrics: dict[str, Any]) -> bool:
        if self._has("finite"):
            return bool(self.problem.finite(metrics))
        return all(math.isfinite(v) for v in metrics.values()
                   if isinstance(v, (int, float)) and not isinstance(v, bool))

    def describe(self) -> dict[str, Any]:
        return dict(self.problem.describe()) if self._has("describe") else {}

    def __repr__(self) -> str:
        return f"with_defaults({self.problem!r})"


def higher_is_better(metric: str) -> bool:
    """The default direction of a metric named ``metric`` (see :class:`Problem`).

    >>> higher_is_better("top5_accuracy"), higher_is_better("macro-f1"), higher_is_better("loss")
    (True, True, False)
    """
    words = str(metric).lower().replace("-", " ").replace("_", " ").split()
    return any(w in HIGHER_IS_BETTER_WORDS for w in words)


def with_defaults(problem: Any) -> ProblemWithDefaults:
    """Check that ``problem`` implements :class:`Problem` and fill in its optional parts.

    Parameters
    ----------
    problem : object
        Anything with the required members of :class:`Problem`.

    Returns
    -------
    ProblemWithDefaults
        ``problem`` itself behind a view that has every optional member (the same view
        when ``problem`` already is one).

    Raises
    ------
    TypeError
        One line naming what is missing or wrong: a required member absent or not
        callable, ``dim`` not a positive integer, ``dtype`` not float32/float64,
        ``metric`` not a string.
    """
    if isinstance(problem, ProblemWithDefaults):
        return problem
    name = type(problem).__name__
    missing = [m for m in REQUIRED_MEMBERS if not hasattr(problem, m)]
    if missing:
        raise TypeError(f"{name} is not a Problem: it lacks {', '.join(missing)} "
                        f"(a Problem needs {', '.join(REQUIRED_MEMBERS)})")
    for m in ("initial", "gradient", "evaluate"):
        if not callable(getattr(problem, m)):
            raise TypeError(f"{name}.{m} must be a method")
    dim = problem.dim
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise TypeError(f"{name}.dim must be a positive integer, got {dim!r}")
    try:
        dtype = np.dtype(problem.dtype)
    except TypeError:
        dtype = None
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name}.dtype must be float32 or float64, got {problem.dtype!r}")
    if hasattr(problem, "metric") and not isinstance(problem.metric, str):
        raise TypeError(f"{name}.metric must be a string (a key of evaluate()'s dict), "
                        f"got {problem.metric!r}")
    return ProblemWithDefaults(problem)
