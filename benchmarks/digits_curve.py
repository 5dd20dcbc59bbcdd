"""The accuracy curve of the ``digits`` problem measured on this machine: Teleportation
against Decentralized SGD on a ring, n = 25 nodes, heterogeneous (alpha = 0.1) and
near-homogeneous (alpha = 10) Dirichlet splits -- the offline counterpart of the paper's
Figure 3 (which needs Fashion-MNIST / CIFAR-10: ``jobs/figure3.sbatch``).

    python benchmarks/digits_curve.py [--quick] [--epochs E] [--seeds 0 1 2]
                                      [--alphas 0.1 10] [--k 8] [--lrs 0.05 ...]
                                      [--methods teleportation dsgd-ring [dsgd-base2]]
                                      [--check-mpi]

Runs go through the simulator in this process (``mpi_teleport.sim.main``): all 25 nodes
in one process, the same numbers as 25 MPI ranks (``--check-mpi`` re-runs the first
configuration for a few rounds under ``mpirun -n 25`` and compares ``metrics.jsonl``).
Every method trains for the same number of epochs (``--epochs``, the paper's
convention), so Teleportation with k active nodes runs n/k times more rounds than DSGD.
Settings: batch 32 per node, momentum 0.9 (travels with the token), constant step size.
``--lrs`` lists the step sizes to run (default 0.5 0.2 0.1 0.05) and the plot keeps, per
method and alpha, the one with the best mean final accuracy over the seeds (a grid search,
as in the paper). The grid comes from a one-seed, 20-epoch preview over
{0.5, 0.2, 0.1, 0.05, 0.01} (``--lrs 0.5 0.2 0.1 0.05 0.01 --epochs 20 --seeds 0 --stem
digits_lr_preview``): 0.01 was worst for every method and alpha; DSGD, which runs n/k
times fewer rounds for the same epochs, wanted the largest step. Teleportation gossips on
a ring over its k = 8 tokens; the test accuracy of the averaged model is logged about 50
times per run.

Writes ``benchmarks/results/digits_runs/alpha<A>/<method>/lr<LR>/seed<S>/`` (the runs),
``digits_accuracy.png`` and ``digits_accuracy.csv`` (via ``plot_accuracy.py``: mean
over seeds, shaded min..max) and ``digits_summary.json`` (final accuracies).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import plot_accuracy  # noqa: E402

METHODS = {
    "teleportation": ("teleportation", "ring"),
    "dsgd-ring": ("dsgd", "ring"),
    "dsgd-base2": ("dsgd", "base2"),
}
N_TRAIN_DIGITS = 1293  # 1797 samples: 80 % train part, minus 10 % validation


def run_flags(args, method: str, alpha: float, lr: float, seed: int, out: Path) -> list[str]:
    algorithm, topology = METHODS[method]
    active = args.nodes if algorithm == "dsgd" else args.k
    rounds = math.ceil(args.epochs * N_TRAIN_DIGITS / (args.batch_size * active))
    log_every = max(1, rounds // args.points)
    flags = ["--nodes", str(args.nodes), "--problem", "digits", "--algorithm", algorithm,
             "--topology", topology, "--epochs", f"{args.epochs:g}", "--batch-size",
             str(args.batch_size), "--lr", f"{lr:g}", "--momentum", f"{args.momentum:g}",
             "--alpha", f"{alpha:g}", "--seed", str(seed), "--log-every", str(log_every),
             "--progress", "off", "--out", str(out)]
    if algorithm == "teleportation":
        flags += ["--k", str(args.k)]
    return flags


def simulate(flags: list[str]) -> None:
    from mpi_teleport.measure import sim

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = sim.main(flags)
    if rc != 0:
        raise RuntimeError(f"mpi_teleport.sim {' '.join(flags)} exited {rc}")


def check_mpi(args, runs_dir: Path) -> dict:
    """A short run of the first configuration under mpirun and in the simulator: their
    metrics.jsonl must agree (time_s aside)."""
    from mpi_teleport.measure import find_mpirun, mpi_env, mpirun_command

    alpha, seed = args.alphas[0], args.seeds[0]
    base = runs_dir.parent / "digits_mpi_check"
    shutil.rmtree(base, ignore_errors=True)
    flags = ["--nodes", str(args.nodes), "--problem", "digits", "--algorithm", "teleportation",
             "--k", str(args.k), "--rounds", "30", "--lr", f"{args.lrs[0]:g}", "--momentum",
             f"{args.momentum:g}", "--alpha", f"{alpha:g}", "--seed", str(seed), "--log-every",
             "5", "--progress", "off"]
    simulate(flags + ["--out", str(base / "sim")])
    cmd = mpirun_command(args.nodes, [sys.executable, "-m", "mpi_teleport.run", *flags,
                                      "--out", str(base / "mpi")], find_mpirun())
    env = mpi_env()
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"ok": False, "error": proc.stderr.strip().splitlines()[-1:] or ["mpirun failed"]}

    def records(d):
        with open(d / "metrics.jsonl") as f:
            return [{k: v for k, v in json.loads(line).items() if k != "time_s"} for line in f]

    same = records(base / "sim") == records(base / "mpi")
    shutil.rmtree(base, ignore_errors=True)
    return {"ok": same, "rounds": 30, "ranks": args.nodes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10 epochs, one seed")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--nodes", type=int, default=25)
    p.add_argument("--k", type=int, default=8, help="Teleportation's active nodes (default 8)")
    p.add_argument("--epochs", type=float, default=None, help="epochs per run (default 100; "
                   "DSGD: 162 rounds, Teleportation k=8: 506 rounds)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lrs", type=float, nargs="+", default=[0.5, 0.2, 0.1, 0.05],
                   help="step sizes to run; the plot keeps the best per method and alpha "
                   "(default 0.5 0.2 0.1 0.05)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.1, 10.0])
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2")
    p.add_argument("--methods", nargs="+", choices=sorted(METHODS),
                   default=["teleportation", "dsgd-ring"])
    p.add_argument("--points", type=int, default=50, help="evaluations per run (about)")
    p.add_argument("--check-mpi", action="store_true",
                   help="also check simulator == MPI on a 30-round run (launches mpirun)")
    p.add_argument("--stem", default=None, help="output name prefix (default digits, "
                   "--quick: digits_quick)")
    p.add_argument("--keep", action="store_true", help="reuse finished runs (summary.json)")
    args = p.parse_args(argv)
    if args.epochs is None:
        args.epochs = 10.0 if args.quick else 100.0
    if args.seeds is None:
        args.seeds = [0] if args.quick else [0, 1, 2]

    out = Path(args.out)
    stem = args.stem or ("digits_quick" if args.quick else "digits")
    if not stem.startswith("digits"):
        p.error("--stem must start with 'digits'")
    runs_dir = out / f"{stem}_runs"
    if not args.keep:
        shutil.rmtree(runs_dir, ignore_errors=True)
    timings = []
    for alpha in args.alphas:
        for method in args.methods:
            for lr in args.lrs:
                for seed in args.seeds:
                    d = runs_dir / f"alpha{alpha:g}" / method / f"lr{lr:g}" / f"seed{seed}"
                    if args.keep and (d / "summary.json").is_file():
                        continue
                    t0 = time.perf_counter()
                    simulate(run_flags(args, method, alpha, lr, seed, d))
                    s = json.loads((d / "summary.json").read_text())
                    timings.append(time.perf_counter() - t0)
                    print(f"alpha={alpha:g} {method:14s} lr={lr:g} seed={seed}: "
                          f"{s['rounds_run']:5d} rounds, final accuracy "
                          f"{100 * s['final_accuracy']:.2f}% ({timings[-1]:.0f} s)", flush=True)

    runs = [plot_accuracy.load_run(f) for f in plot_accuracy.find_runs([runs_dir])]
    curves = plot_accuracy.build_curves(runs, "best")
    png, csv_path = out / f"{stem}_accuracy.png", out / f"{stem}_accuracy.csv"
    lrs = "/".join(f"{lr:g}" for lr in args.lrs)
    plot_accuracy.plot(curves, png, f"digits, n = {args.nodes} nodes (simulator = MPI), batch "
                       f"{args.batch_size}, momentum {args.momentum:g}, "
                       f"lr {'best of ' if len(args.lrs) > 1 else ''}{lrs}, "
                       f"{args.epochs:g} epochs, mean over {len(args.seeds)} seed(s)")
    plot_accuracy.write_csv(curves, csv_path)
    final = {}
    for (problem, alpha), panel in curves.items():
        for method, options in panel.items():
            lr, agg = options[0]
            final[f"alpha={alpha:g} | {method}"] = {
                "final_accuracy_mean": float(agg["mean"][-1]),
                "final_accuracy_min": float(agg["min"][-1]),
                "final_accuracy_max": float(agg["max"][-1]),
                "epochs": float(agg["epoch"][-1]), "seeds": agg["seeds"], "lr": lr}
    earlier = out / f"{stem}_summary.json"  # --keep: the reused runs' time counts too
    if args.keep and earlier.is_file():
        timings.append(json.loads(earlier.read_text()).get("wall_time_s", 0.0))
    summary = {"nodes": args.nodes, "k": args.k, "epochs": args.epochs, "lrs": args.lrs,
               "momentum": args.momentum, "batch_size": args.batch_size, "alphas": args.alphas,
               "seeds": args.seeds, "methods": args.methods, "final": final,
               "wall_time_s": sum(timings)}
    if args.check_mpi:
        summary["mpi_check"] = check_mpi(args, runs_dir)
        print(f"simulator == MPI (30 rounds, {args.nodes} ranks): {summary['mpi_check']}")
    (out / f"{stem}_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for line in plot_accuracy.summary_lines(curves):
        print(line)
    print(f"wrote {png}, {csv_path}, {out / (stem + '_summary.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
