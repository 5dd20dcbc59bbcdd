"""The one builder of a run's :class:`~mpi_teleport.core.spec.RunSpec` and the one record
of its settings, for both front ends (the RunSettings around them:
:mod:`mpi_teleport.session.prepare`).

The command lines (:func:`mpi_teleport.front.cli.from_args`: a job's flags and TOML file)
and the Python API (:func:`mpi_teleport.session.api_checks.checked`: one call's keywords)
each check what they were given by the settings table's rules
(:mod:`mpi_teleport.session.settings`) into :class:`~mpi_teleport.session.settings.Values`
named as the table names its rows and check the disk
(:func:`mpi_teleport.session.disk_check.check_disk`); then the one preparation of a run,
:func:`mpi_teleport.session.prepare.prepare`, builds the run's
:class:`~mpi_teleport.core.spec.RunSpec` from its values by the one :func:`spec_of`
(:func:`run_spec` with the optimizer's rule) and hands all of it to :func:`build`, which
derives the rest the same way for both: when the run records and evaluates, its latency
layer, elastic mode and its failure plan, and what config.json and a checkpoint's
manifest keep (:func:`record`, also what a resume compares, so the two front ends
cannot record or compare a setting differently).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..core import topology as topo
from ..core.spec import RunSpec, cosine_lr
from ..errors import UsageError
from . import resume as resume_rules
from .loop_options import momentum_of, within_phase
from .settings import rows, setting

__all__ = ["active_nodes", "group", "record", "run_spec", "spec_of"]


def record(values: Mapping[str, Any], rule=None,
           identity: Mapping[str, Any] | None = None) -> dict:
    """What config.json and a checkpoint's manifest keep of a run's settings ``values``
    (checked, named as the table's rows): each setting the values hold, as its row says
    (``always``; ``when set``: only away from its default, so records written before the
    setting existed read the same; ``no``: another row's record holds it), in the
    table's order, as it reads back from JSON. A step size or topology given as a
    function is recorded by its values or name (:func:`~.resume.describe_lr`,
    :func:`~mpi_teleport.core.topology.describe`); the optimizer as the step ``rule`` it
    builds (its ``describe()``; None: SGD with the momentum, recorded as nothing);
    ``identity``: the problem's, where the values do not name it (a Python object's
    class and fingerprint, :func:`~.resume.describe_problem`)."""
    out: dict[str, Any] = {}
    for row in rows():
        if row.name not in values or row.record == "no" or row.name == "optimizer":
            continue  # (the optimizer: recorded as the rule it builds, below)
        value = values[row.name]
        if row.record == "when set" and value == row.default:
            continue
        out[row.name] = _as_recorded(row.name, value)
    out.update(identity or {})
    if rule is not None:  # (recorded when set: a resume with another optimizer is refused)
        out["optimizer"] = rule.describe()
    return resume_rules.plain(out)


def _as_recorded(name: str, value):
    if name == "lr":
        return resume_rules.describe_lr(value)
    if name == "topology":
        return topo.describe(value)
    if name == "momentum":
        return float(value)  # (Nesterov's form is its own row, nesterov)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def group(values: Mapping[str, Any], name: str) -> dict:
    """The fields of the settings group ``name`` of a RunSettings (``"logging"``,
    ``"latency"``) that ``values`` hold, from the table's ``where``
    (``"logging.log_every"``: ``log_every``): a row placed in a group is carried there
    without a line here."""
    prefix = name + "."
    return {row.where[len(prefix):]: values[row.name] for row in rows()
            if row.where is not None and row.where.startswith(prefix) and not row.built
            and row.name in values}


def _value(values: Mapping[str, Any], name: str):
    """A setting's value, or its row's default where the front end holds none."""
    return values[name] if name in values else setting(name).default


def run_spec(values: Mapping[str, Any], rule=None, per_epoch: float | None = None) -> RunSpec:
    """The :class:`~mpi_teleport.core.spec.RunSpec` of one run, from its checked ``values``
    (named as the table's rows), the same way for both front ends: ``algorithm``
    (teleportation or dsgd; ``k`` 'auto' is Algorithm 2, the search),
    ``nodes``, ``k`` (DSGD: n; the search: none), ``rounds``, ``lr`` (a number or a
    function of the round; ``lr_schedule`` 'cosine' decays the number over the run's
    rounds, both phases of the search; 'cosine-warmup', the authors' recipe,
    :func:`~mpi_teleport.problems.authors_recipe.cosine_with_warmup` over ``epochs``
    after ``warmup_epochs``, ``per_epoch`` rounds an epoch, each phase of the search
    anew), ``momentum`` (in Nesterov's form with
    ``nesterov``), ``topology``, ``variant``, ``seed`` and ``k_select``, each at its
    row's default where the values hold none. ``rule``: the optimizer's step rule the
    front end built (:func:`mpi_teleport.session.loop_options.step_rule` of the command
    line's ``--optimizer``, or the API's ``optimizer=``); None: SGD with the momentum.
    UsageError (one line) for ``nesterov`` without momentum, or 'cosine-warmup' without
    epochs or ``per_epoch``."""
    algorithm, k, nodes, rounds = (values["algorithm"], values.get("k"), values["nodes"],
                                   values["rounds"])
    search = k == "auto"  # (Algorithm 2)
    lr = values["lr"]
    schedule = _value(values, "lr_schedule")
    if schedule == "cosine":
        lr = cosine_lr(lr, 2 * rounds if search else rounds)
    elif schedule == "cosine-warmup":
        lr = _cosine_with_warmup(values, per_epoch, search)
    tokens = None if search else nodes if algorithm == "dsgd" else k
    return RunSpec("search" if search else algorithm, nodes, tokens, rounds, lr,
                   momentum_of(_value(values, "momentum"), _value(values, "nesterov")),
                   _value(values, "topology"), _value(values, "variant"),
                   _value(values, "seed"), _value(values, "k_select"), rule)


def spec_of(values: Mapping[str, Any], problem=None) -> RunSpec:
    """The :class:`~mpi_teleport.core.spec.RunSpec` of one run's checked ``values`` (a
    :class:`~.settings.Values`) for ``problem``: :func:`run_spec` with the optimizer's
    step rule (the command line's ``optimizer`` names torch.optim's, built here for the
    problem's parameters, :func:`~.loop_options.step_rule`; the API's holds the rule
    ``optimizer=`` built; none: SGD with the momentum) and, for the authors' schedule,
    the rounds an epoch takes with the run's active nodes."""
    from .loop_options import scheduled, step_rule

    optimizer = values.get("optimizer")
    if isinstance(optimizer, str):
        momentum, nesterov, rule = step_rule(values, problem)
    else:
        momentum, nesterov, rule = _value(values, "momentum"), _value(values, "nesterov"), optimizer
    if values.get("lr_scheduler") is not None:  # (the command line's scheduler by name)
        lr = scheduled(values, problem, active_nodes(values))
        search = values.get("k") == "auto"
        values = {**values, "lr": within_phase(lr, values["rounds"]) if search else lr}
    per_epoch = None  # (cosine-warmup: rounds an epoch, as epochs counts them)
    if _value(values, "lr_schedule") == "cosine-warmup" and getattr(problem, "n_train", None):
        per_epoch = problem.n_train / (int(_value(values, "batch_size")) * active_nodes(values))
    return run_spec({**values, "momentum": momentum, "nesterov": nesterov}, rule, per_epoch)


def active_nodes(values: Mapping[str, Any]) -> int:
    """Nodes active a round in a run of ``values``: n for DSGD and for each phase of
    Algorithm 2 (``k`` 'auto'), else k."""
    k: Any = values.get("k")
    return int(values["nodes"] if values["algorithm"] == "dsgd" or k == "auto" else k)


def _cosine_with_warmup(values: Mapping[str, Any], per_epoch: float | None, search: bool):
    """The authors' schedule of ``values`` (their lr, epochs, warmup_epochs), a function
    of the round (of the round within its phase for the search, as the API's search_k
    gives a function)."""
    from ..problems.authors_recipe import cosine_with_warmup
    from .loop_options import within_phase

    epochs = _value(values, "epochs")
    if epochs is None or not per_epoch:
        raise UsageError("lr_schedule 'cosine-warmup' counts epochs: it needs epochs and a "
                         "problem that knows n_train and batch_size")
    lr = cosine_with_warmup(values["lr"], epochs, per_epoch,
                            warmup_epochs=_value(values, "warmup_epochs"))
    return within_phase(lr, values["rounds"]) if search else lr
