"""with_defaults() is an explicit view: it declares every member the package reads (the
Problem protocol's required and optional ones) and forwards nothing else; the user's
own attributes are reached through ``.problem``. Serial, no MPI."""
from __future__ import annotations

import numpy as np
import pytest

from mpi_teleport.core.evaluation import is_shared
from mpi_teleport.problem import SHARED_EVALUATION, ProblemWithDefaults, with_defaults
from mpi_teleport.problems.quadratic import Quadratic


class Bare:
    dim, dtype = 2, np.float64
    extra = "mine"

    def initial(self):
        return np.zeros(2)

    def gradient(self, nodes, x, t, out=None):
        return np.subtract(x, 1.0, out=out)

    def evaluate(self, x):
        return {"error": float(np.mean(x ** 2))}


def test_no_attribute_forwarding():
    assert "__getattr__" not in vars(ProblemWithDefaults)
    view = with_defaults(Bare())
    with pytest.raises(AttributeError):
        view.extra  # noqa: B018  (not a Problem member: through .problem)
    assert view.problem.extra == "mine"


def test_optional_facts_are_none_when_absent_and_the_problems_own_otherwise():
    view = with_defaults(Bare())
    assert (view.nodes, view.batch_size, view.token_device, view.n_train) == (None,) * 4
    assert not view.shares_evaluation and not is_shared(Bare())
    quad = with_defaults(Quadratic(n=4, d=2))
    assert quad.dim == 2 and quad.metric == Quadratic(n=4, d=2).metric


def test_shared_evaluation_is_declared_all_or_nothing():
    class Shared(Bare):
        eval_batch_size, n_test, n_validation = 4, 8, 0

        def evaluation_sums(self, vector, lo=0, hi=None, split="test"):
            return np.full((1, 1), float(hi - lo))

        def metrics_from_sums(self, sums, x=None):
            return {"error": float(np.sum(sums)), "with_x": x is not None}

        @staticmethod
        def average(x):
            return x.mean(axis=0)

    view = with_defaults(Shared())
    assert view.shares_evaluation and is_shared(view, "test") and not is_shared(view, "validation")
    assert view.evaluation_sums(np.zeros(2), 0, 4, "test")[0, 0] == 4.0
    assert view.metrics_from_sums(np.ones((2, 1))) == {"error": 2.0, "with_x": False}
    assert view.metrics_from_sums(np.ones((2, 1)), np.zeros((1, 2)))["with_x"]
    partial = type("Partial", (Bare,), {"average": staticmethod(lambda x: x)})
    assert not with_defaults(partial()).shares_evaluation
    assert set(SHARED_EVALUATION) >= {"evaluation_sums", "metrics_from_sums", "average"}
