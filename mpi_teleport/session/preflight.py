"""Checks against the disk before a command-line run starts.

The values of the settings are checked by :func:`mpi_teleport.session.settings.resolve` (through
:mod:`mpi_teleport.session.settings`, the same rules as the Python API); what depends on files
happens here, on every process before any communication: the settings a ``--resume``
inherits from its checkpoint (:func:`mpi_teleport.session.resume.inherit`), the data directory
and the memory a run needs (:func:`check_fits`). :func:`load` is the whole path from
raw settings to a job's :class:`~mpi_teleport.session.settings.Values`. What the runs then
ask of the disk (a latency matrix file, writable outputs, the checkpoint resumed, the
checkpoint directories, the locks) is the step both front ends share,
:func:`mpi_teleport.session.disk_check.check_disk` (:func:`~mpi_teleport.session.prepare.check_job`
makes a job's).
"""
from __future__ import annotations

import os
from pathlib import Path

from .job import runs_requested
from .settings import NETWORK_PROBLEMS, resolve
from ..checkpoint.find import any_checkpoint
from ..errors import UsageError
from ..disk.memory import memory_bytes
from ..disk.paths import absolute_paths
from ..errors import CLI
from .resume import check_auto_length, inherit


def load(raw: dict, world_size: int | None = None, script: bool = False):
    """Raw settings (flags over a TOML file) -> a job's validated Values, checked against the
    disk: settings a ``--resume`` leaves out come from its checkpoint. ``script``: the
    flags of a script running its own problem, which resumes as the API does (its
    settings given again, compared with the checkpoint's, none taken from it)."""
    raw = absolute_paths(auto_resume(raw))
    if script:
        return resolve(raw, world_size, script=True)
    if raw.get("resume") is not None:
        given = raw.get("nodes") is not None
        raw = inherit(raw)
        if not given and raw.get("nodes") is not None:
            raw["_inherited_nodes"] = True
    return check_fits(check(resolve(raw, world_size)), world_size)


def auto_resume(raw: dict) -> dict:
    """``--resume auto`` (the API's ``resume="auto"``): the run's directory
    (``--checkpoint-dir``, else ``--out``) when it holds a complete checkpoint -- an
    unfinished run is continued, a finished one reported as it ended -- else no resume, a
    fresh run: one command line a job array can rerun. One line without a directory."""
    if raw.get("resume") != "auto":
        return raw
    places = [raw[name] for name in ("checkpoint_dir", "out") if raw.get(name) is not None]
    if not places:
        raise UsageError("--resume auto needs --out or --checkpoint-dir: the directory to "
                         "continue a run from, or to start one in")
    found = next((p for p in places if Path(p).is_dir() and any_checkpoint(Path(p))), None)
    if found is not None:  # (the same run only: another length continues when asked)
        where = Path(found)
        hit = any_checkpoint(where)
        try:
            rounds = None if raw.get("rounds") is None else int(raw["rounds"])
            epochs = None if raw.get("epochs") is None else float(raw["epochs"])
        except (TypeError, ValueError):
            rounds = epochs = None  # (refused in one line by the settings' own check)
        if hit is not None:
            check_auto_length(where, hit[1], CLI, rounds=rounds, epochs=epochs)
    return {**raw, "resume": found}


def check(cfg):
    """The checks of a job's data directory; returns it, or raises UsageError
    (what the runs ask of the disk: :func:`prepared`)."""
    if (cfg.problem in NETWORK_PROBLEMS and cfg.problem != "digits" and not cfg.download
            and cfg.data_dir is not None):  # (none given: the reader searches, and says where)
        if not os.path.isdir(cfg.data_dir):
            raise UsageError(f"--data-dir {cfg.data_dir!r} does not exist; put the {cfg.problem} "
                             "files there or add --download on a machine with internet")
    return cfg


# ----------------------------------------------------------------------------- memory
# input floats per sample of each built-in network problem (8x8, 28x28, 3x32x32)
_FEATURES = {"digits": 64, "fashion-mnist": 784, "cifar10": 3072}
_QUADRATIC_VECTORS = 6  # per token in the simulator: x, v, spare, mixed, gradient, noise
_MPI_VECTORS = 10  # per rank: its token (x, v), the received ones, gradient, noise, stamps
_BATCH_COPIES = 4  # a batch's input, its activations and their gradients, roughly
_SPARE_BYTES = 64  # the simulator's bookkeeping per hot spare (ids in lists; 52 measured)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _tokens_here(cfg, world_size) -> int:
    """Tokens one process holds at once: one per rank under MPI; in the simulator the most
    any requested run has (k, n for DSGD and for Algorithm 2's first phase)."""
    if world_size is not None:
        return 1
    most = 1
    for algorithm, k in runs_requested(cfg):
        most = max(most, cfg.nodes if algorithm == "dsgd" or k == "auto" else int(k))
    return most


def check_spares_fit(spares: int, naming=None) -> None:
    """Refuse, with the estimate, more hot spares than the simulator can keep track of
    (command line and API alike; ``naming``: how to spell the setting, default the flag)."""
    from ..errors import CLI

    available = memory_bytes()
    if available is not None and spares * _SPARE_BYTES > available:
        naming = naming or CLI
        raise UsageError(
            f"{naming.given('spares', spares)}: the simulator needs about {_gib(spares * _SPARE_BYTES)} "
            f"to keep track of {spares} hot spares, more than the {_gib(available)} of memory here; "
            f"a spare only takes over a lost node: give at most as many as {naming.name('fail')} loses")


def check_fits(cfg, world_size=None):
    """Refuse, with the estimate, a run whose arrays cannot fit in this machine's memory
    (before anything is allocated: numpy would fail deep inside with a traceback, or the
    kernel would kill the job). Returns ``cfg``."""
    available = memory_bytes()
    if available is None:
        return cfg
    tokens = _tokens_here(cfg, world_size)
    if cfg.problem == "quadratic":
        per = _MPI_VECTORS if world_size is not None else _QUADRATIC_VECTORS
        need = 8 * cfg.dim * (per * tokens + 2)
        if need > available:
            where = "each rank" if world_size is not None else "the simulator"
            raise UsageError(
                f"--dim {cfg.dim}: {where} needs about {_gib(need)} for {tokens} token(s) of "
                f"{cfg.dim} float64 values, more than the {_gib(available)} of memory here; "
                f"choose a smaller --dim" + ("" if world_size is not None else
                                              " or fewer tokens (--k, --nodes for dsgd)"))
    if world_size is None:  # (under MPI a spare is a rank of the job)
        check_spares_fit(getattr(cfg, "spares", 0) or 0)
    features = _FEATURES.get(cfg.problem)
    if features is not None:
        need = cfg.batch_size * (features * 4 * _BATCH_COPIES + 8)
        if need > available:
            raise UsageError(
                f"--batch-size {cfg.batch_size}: one {cfg.problem} batch needs about "
                f"{_gib(need)} ({features} float32 inputs per sample, with activations), "
                f"more than the {_gib(available)} of memory here; choose a smaller --batch-size")
    return cfg
