"""Single-process simulator: all n nodes in one process, vectorised over tokens.

Same schedule, topologies, problems, seeds and output files as the MPI runtime; it is
the oracle for tests, a cheap preview before a cluster job, and the way to study n far
beyond the ranks at hand. Teleportation keeps only the k token rows, O(k d) memory, so
n = 10^6 nodes costs no more per round than n = 100.

    python -m mpi_teleport.sim --nodes 100 --k 4 --topology ring --out runs/demo
"""
from __future__ import annotations

import sys
import time

import numpy as np

from . import checkpoint, cli, latency, report, schedule, signals
from . import topology as topo
from .algorithms import learning_rate, local_step, lr_at
from .config import UsageError
from .memory import keep_freed_memory
from .metrics import NonFiniteError, Recorder, is_log_round
from .output import RunFiles
from .problems import describe, make_problem, with_epochs
from .problems.datasets import DatasetMissingError
from .progress import Progress

PROG = "python -m mpi_teleport.sim"


_WORK: dict = {}


def _work(name: str, shape, dtype) -> np.ndarray:
    """Reusable work arrays (no fresh allocation, hence no page faults, per round)."""
    key = (name, tuple(shape), np.dtype(dtype).str)
    if key not in _WORK:
        if len(_WORK) > 32:
            _WORK.clear()
        _WORK[key] = np.empty(shape, dtype)
    return _WORK[key]


def mix(w: topo.Mixing, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x_j = sum_m W[j, m] y_m for every token j, each sum in ascending m (Alg. 1 line 13).

    In y's dtype (weights rounded to it once, every product and partial sum rounded to
    it): exactly what a receiving rank does (algorithms.weighted_sum), float64 for the
    quadratic problem and float32 for network tokens. ``out`` (not aliasing y) receives
    the result.
    """
    k, d = y.shape
    out = np.empty_like(y) if out is None else out
    if w.complete:
        coef = y.dtype.type(1.0 / w.k)
        row, tmp = _work("row", (d,), y.dtype), _work("tmp", (d,), y.dtype)
        np.multiply(y[0], coef, out=row)
        for m in range(1, w.k):
            np.multiply(y[m], coef, out=tmp)
            row += tmp
        out[...] = row
        return out
    tmp = _work("tmp", (k, d), y.dtype)
    for s, (rows, sources, weights) in enumerate(w.slots()):
        weights = weights.astype(y.dtype, copy=False)
        if len(rows) == k:  # every receiver has an s-th source: no gather/scatter
            np.take(y, sources, axis=0, out=tmp, mode="clip")
            if s == 0:  # slot 0 covers every row (each row has itself or a source)
                np.multiply(tmp, weights, out=out)
            else:
                tmp *= weights
                out += tmp
        else:
            out[rows] += weights * y[sources]
    return out


def simulate(cfg, algorithm: str, k: int, files: RunFiles, progress: Progress | None = None,
             terminator=None) -> dict:
    """Run Teleportation (k tokens) or Decentralized SGD (k = n, fixed placement).
    Checkpoints, resume and the stop on a signal: checkpoint.Keeper."""
    keep_freed_memory()
    problem = make_problem(cfg)
    cfg = with_epochs(cfg, algorithm, k, problem)
    if progress is not None:
        progress.plan(cfg, k)
    n = cfg.nodes
    if algorithm == "dsgd":
        k = n
    files.config({**cfg.to_dict(), "algorithm": algorithm, "k": k, "backend": "sim", **describe(problem)})
    if k == "auto":  # Algorithm 2
        from .search import simulate_search

        if terminator is not None:
            terminator.release()  # no checkpoints: signals end it at once

        return simulate_search(cfg, problem, files, progress)
    rec = Recorder(cfg, problem, files, algorithm, k, progress)
    lr = learning_rate(cfg)
    latency.attach_sim(cfg, algorithm, k, rec)  # virtual_time_s by the latency model (§6)
    x = np.tile(problem.initial(), (k, 1))
    v = np.zeros_like(x) if cfg.momentum > 0 else None
    keeper = checkpoint.Keeper(cfg, algorithm, k, terminator)
    x, v, r = keeper.restore_sim(x, v, rec)  # resume: the token matrices, the records
    start = time.perf_counter() - keeper.wall_offset
    if not keeper.resumed:  # (a resumed run has logged round r already)
        rec.log(0, x, 0.0)
    fixed = schedule.fixed_holders(n)
    y_buf, x_spare = np.empty_like(x), np.empty_like(x)  # no allocation per round
    for t in keeper.rounds(cfg.rounds):
        holders = fixed if algorithm == "dsgd" else schedule.holders(cfg.seed, n, k, t)
        y = local_step(problem, holders, x, v, t, lr_at(lr, t), cfg.momentum, out=y_buf)
        x, x_spare = mix(topo.mixing(cfg.topology, k, t), y, out=x_spare), x
        r, stop = t + 1, False
        if is_log_round(r, cfg.log_every, cfg.rounds):
            paused = rec.pause()
            stop = rec.log(r, x, rec.elapsed())
            rec.resume(paused)
        keeper.after_round_sim(r, x, v, rec, stop, cfg.rounds)  # checkpoint; stop on a signal
        if stop:
            break
    summary = rec.summary(time.perf_counter() - start, {"backend": "sim"})
    keeper.finish_sim(r, x, v, rec, summary)  # the final checkpoint, with --checkpoint-every
    return summary


def main(argv=None) -> int:
    parser = cli.build_parser(
        PROG,
        "Simulate Teleportation and Decentralized SGD with all n nodes in one process.",
        "Example:\n  python -m mpi_teleport.sim --nodes 100 --k 4 --topology base2 --out runs/x\n"
        "Outputs (with --out): config.json, metrics.jsonl, summary.json "
        "(compare: one subdirectory per algorithm).",
    )
    try:
        with signals.Terminator() as terminator:  # SIGTERM/SIGUSR1: checkpoint, exit 75
            cfg = cli.parse(parser, argv)
            summaries = []
            for algorithm, k in report.runs_requested(cfg):
                progress = Progress.for_run(cfg, algorithm)
                files = RunFiles(report.out_dir(cfg, algorithm))
                summaries.append(simulate(cfg, algorithm, k, files, progress, terminator))
    except (UsageError, NonFiniteError, DatasetMissingError) as exc:
        return cli.fail(PROG, str(exc))
    except signals.Terminated as exc:
        print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        return signals.exit_status(exc)
    print(report.finish(cfg, summaries, report.header(cfg, f"simulator, n={cfg.nodes}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
