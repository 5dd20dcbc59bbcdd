"""The paper's Figure 3, Fashion-MNIST half, on the real data (Sec. 5.2, App. Table
"Experimental setups for Fashion MNIST"), resumable.

    python benchmarks/figure3_fashion_mnist.py [--quick] [--workers 2] [--epochs 50]
        [--select-epochs 10] [--seeds 0 1 2] [--alphas 0.1 10] [--lrs 0.1 0.01 0.001]
        [--methods teleportation dsgd-ring dsgd-base2] [--data-dir DIR] [--report-only]
        [--recipe paper|authors] [--authors-choices partition model crop]
        [--lr-schedule constant|cosine-warmup]

Recipe: ``--recipe paper`` (default) is the paper's table as below;
``--recipe authors`` is the authors' own harness (github.com/yukiTakezawa/BaseGraph at
c89b116: balanced Dirichlet shares of 2,400 samples, LeNet with GroupNorm, random crops
without normalisation; :mod:`mpi_teleport.problems.authors_recipe`), written to
``figure3_fashion_mnist_authors.*``; ``--authors-choices`` takes any of its choices on
their own (files ``figure3_fashion_mnist_<choices>.*``). Every run of either recipe
records both evaluations every ``--eval-epochs``: the averaged model (``accuracy``) and the
mean over the models held (``node_mean_accuracy``: the n nodes' for DSGD, the k tokens'
for Teleportation), which costs one test-set evaluation per model.

Protocol: LeNet-5, n = 25 nodes, Dirichlet alpha in {0.1, 10} over the whole training set
(--val-fraction 0: no validation split, as the paper trains on all 60,000 images), batch
32 drawn by shuffled per-node passes (--sampling epochs: the authors' DataLoader), heavy-ball
momentum 0.9 travelling with the token, the same number of epochs for every method
(Teleportation with k active nodes runs n/k times more rounds than DSGD), test accuracy of
the averaged model every ``--eval-epochs`` epochs (default 2). Methods: Teleportation
(k = 8 active nodes, ring over the tokens: the paper does not state k for Figure 3; 8 is the
package default min(8, n) and the project's choice since ``jobs/figure3.sbatch``),
Decentralized SGD on the ring and on the Base-2 Graph.

Step size: from the paper's grid {0.1, 0.01, 0.001}, chosen per (alpha, method) by the final
test accuracy of a one-seed run (seed 0) of ``--select-epochs`` epochs (phase "select");
then every seed runs ``--epochs`` epochs with the chosen step size (phase "final"). A step
size under which a final run's numbers become non-finite (the run stops, exit 2) is dropped
for that (alpha, method), recorded in the JSON's ``diverged``, and every seed runs the next
best step size of the selection (``step_size_used``).

Schedule: the step size is constant (the paper's table) unless ``--lr-schedule
cosine-warmup`` (the authors' harness, timm's schedule stepped per epoch: a 10-epoch linear
warm-up from 5e-5, then a cosine that spans ``--epochs`` epochs after the warm-up, so a run
ends before the floor, as theirs does). The selection runs stay constant, so a schedule's final runs use the
step sizes of the same committed selection; they are written under ``final-<schedule>/``
and reported as ``<stem>_<schedule>.*`` beside the constant runs.

Every run is the simulator (``python -m mpi_teleport.sim``, the numbers of 25 MPI ranks),
one process per run, ``--workers`` at a time, trained with ``--latency mod:5 --clock virtual
--compute-time 20`` (latency changes time, never numbers: the same runs give Figure 4 through
``benchmarks/bench_figure4.py --problem fashion-mnist``). Resumable: a finished run has its
summary.json and is skipped; an interrupted one resumes from its newest checkpoint
(``--checkpoint-every``: every 10 eval intervals; SIGTERM or Ctrl-C to this script makes
every run in progress write one first and the script exit with status 75); a run's
checkpoints are deleted once it is done.

Writes ``benchmarks/results/figure3_fashion_mnist_runs/<phase>/alpha<A>/<method>/lr<LR>/seed<S>/``
(config.json, metrics.jsonl, summary.json) and ``figure3_fashion_mnist.{json,csv,png}``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from digits_curve import METHODS  # noqa: E402  (the methods of the paper's Figure 3)
from mpi_teleport.measure import authors_recipe  # noqa: E402  (numpy only at import)

LABELS = {"teleportation": "Teleportation (k=8, ring)", "dsgd-ring": "Decentralized SGD (ring)",
          "dsgd-base2": "Decentralized SGD (Base-2 Graph)"}
N_TRAIN = 60000
STEM = "figure3_fashion_mnist"
DIVERGED = "diverged.json"  # beside a run whose numbers became non-finite


def rounds_per_epoch(args, method: str) -> float:
    active = args.nodes if METHODS[method][0] == "dsgd" else args.k
    return N_TRAIN / (args.batch_size * active)


def run_flags(args, method: str, alpha: float, lr: float, seed: int, epochs: float,
              schedule: str = "constant") -> list[str]:
    algorithm, topology = METHODS[method]
    per_epoch = rounds_per_epoch(args, method)
    log_every = max(1, round(args.eval_epochs * per_epoch))
    # (both evaluations in every run: the recipe's choices and the node-mean evaluation)
    problem = authors_recipe.authors_flags((*args.choices, "evaluation"))
    flags = ["--nodes", str(args.nodes), "--problem", problem, "--algorithm", algorithm,
             "--topology", topology, "--epochs", f"{epochs:g}", "--batch-size",
             str(args.batch_size), "--sampling", "epochs", "--val-fraction", "0",
             "--lr", f"{lr:g}", "--momentum", f"{args.momentum:g}", "--alpha", f"{alpha:g}",
             "--seed", str(seed), "--log-every", str(log_every), "--progress", "off",
             "--latency", "mod:5", "--clock", "virtual", "--compute-time", "20",
             "--checkpoint-every", str(5 * log_every), "--keep-checkpoints", "1"]
    if args.data_dir:
        flags += ["--data-dir", args.data_dir]
    if algorithm == "teleportation":
        flags += ["--k", str(args.k)]
    if schedule != "constant":
        flags += ["--lr-schedule", schedule]
    return flags


def run_dir(args, phase: str, method: str, alpha: float, lr: float, seed: int) -> Path:
    if phase == "final" and args.lr_schedule != "constant":
        phase = f"final-{args.lr_schedule}"  # (beside the constant runs, same selection)
    return Path(args.runs) / phase / f"alpha{alpha:g}" / method / f"lr{lr:g}" / f"seed{seed}"


def execute(args, flags: list[str], d: Path, label: str) -> dict:
    """One run: skipped when finished, resumed from its newest checkpoint when interrupted."""
    if (d / "summary.json").is_file():
        return json.loads((d / "summary.json").read_text())
    if (d / DIVERGED).is_file():
        return json.loads((d / DIVERGED).read_text())
    resume = (d / "checkpoints").is_dir() and any((d / "checkpoints").glob("round-*"))
    cmd = [sys.executable, "-m", "mpi_teleport.sim", *flags, "--out", str(d)]
    if resume:
        cmd += ["--resume", str(d)]
    elif d.exists():
        shutil.rmtree(d)  # a start that wrote no checkpoint yet: start again
    d.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(d.parent / f"{d.name}.log", "a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        RUNNING.add(proc)
        try:
            proc.wait()
        finally:
            RUNNING.discard(proc)
    if STOPPING:
        raise SystemExit(75)
    log_text = (d.parent / f"{d.name}.log").read_text()
    if proc.returncode == 2 and "became non-finite" in log_text:
        # the step size diverged: a result of the protocol, recorded (the caller moves on
        # to the next step size of the selection)
        marker = {"diverged": True, "message": log_text.strip().splitlines()[-1]}
        (d / DIVERGED).write_text(json.dumps(marker) + "\n")
        shutil.rmtree(d / "checkpoints", ignore_errors=True)
        print(f"{label}: diverged ({marker['message']})", flush=True)
        return marker
    if proc.returncode != 0:
        raise RuntimeError(f"{label}: mpi_teleport.sim exited {proc.returncode} (log: "
                           f"{d.parent / (d.name + '.log')})")
    shutil.rmtree(d / "checkpoints", ignore_errors=True)
    (d.parent / f"{d.name}.log").unlink(missing_ok=True)
    s = json.loads((d / "summary.json").read_text())
    print(f"{label}: final accuracy {100 * s['final_accuracy']:.2f}% "
          f"({time.perf_counter() - t0:.0f} s{', resumed' if resume else ''})", flush=True)
    return s


RUNNING: set = set()  # the runs in progress
STOPPING: list = []


def _stop(signum, frame) -> None:
    """SIGTERM/SIGINT: every run in progress writes its checkpoint (the simulator's own
    handling of SIGTERM, exit 75); the next start resumes them."""
    if not STOPPING:
        print(f"{Path(__file__).name}: stopping ({signal.Signals(signum).name}): the runs in "
              "progress write their checkpoints; the same command resumes them (status 75)",
              file=sys.stderr, flush=True)
    STOPPING.append(signum)
    for proc in list(RUNNING):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)


def run_all(args, jobs: list) -> list:
    """Every job, ``--workers`` at a time; a run that fails (other than diverging) is
    reported and the others go on; then the first failure is raised."""
    def one(job):
        try:
            return execute(args, *job)
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001  (reported, the sweep goes on)
            print(f"FAILED {exc}", flush=True)
            return exc

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(one, jobs))
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise failed[0]
    return results


def choose_lrs(args) -> dict:
    """(alpha, method) -> the step size whose one-seed selection run ends best."""
    jobs, keys = [], []
    for alpha in args.alphas:
        for method in args.methods:
            for lr in args.lrs:
                d = run_dir(args, "select", method, alpha, lr, args.seeds[0])
                label = f"select alpha={alpha:g} {method} lr={lr:g}"
                jobs.append((run_flags(args, method, alpha, lr, args.seeds[0], args.select_epochs), d, label))
                keys.append((alpha, method, lr))
    finals = run_all(args, jobs)
    chosen, table = {}, {}
    for (alpha, method, lr), s in zip(keys, finals):
        acc = s.get("final_accuracy")
        acc = acc if isinstance(acc, (int, float)) and math.isfinite(acc) else -1.0
        table.setdefault((alpha, method), {})[lr] = acc
    for key, by_lr in table.items():
        chosen[key] = max(sorted(by_lr), key=lambda lr: (by_lr[lr], lr))
    return chosen, table


def ranking(table: dict, key) -> list:
    """Step sizes of a (alpha, method), best selection accuracy first."""
    by_lr = table[key]
    return sorted(by_lr, key=lambda lr: (-by_lr[lr], -lr))


def diverged(args, key, lr) -> list:
    alpha, method = key
    return [seed for seed in args.seeds
            if (run_dir(args, "final", method, alpha, lr, seed) / DIVERGED).is_file()]


def final_runs(args, chosen: dict, table: dict) -> None:
    """Every seed with the chosen step size; where a seed's run diverges (non-finite), that
    step size is dropped for the (alpha, method) and every seed runs the next best of the
    selection (the divergences are reported in the JSON)."""
    current = dict(chosen)
    while True:
        for key, lr in current.items():  # (a step size already seen diverging is not rerun)
            while lr is not None and diverged(args, key, lr):
                order = ranking(table, key)
                lr = order[order.index(lr) + 1] if order.index(lr) + 1 < len(order) else None
            current[key] = lr
        jobs = []
        for seed in args.seeds:
            for alpha in args.alphas:
                for method in args.methods:
                    lr = current[(alpha, method)]
                    if lr is None:
                        continue
                    d = run_dir(args, "final", method, alpha, lr, seed)
                    jobs.append((run_flags(args, method, alpha, lr, seed, args.epochs,
                                           args.lr_schedule), d,
                                 f"final alpha={alpha:g} {method} lr={lr:g} seed={seed}"))
        run_all(args, jobs)
        if not any(lr is not None and diverged(args, key, lr) for key, lr in current.items()):
            return


def used_lrs(args, chosen: dict, table: dict) -> dict:
    """The step size each (alpha, method) ends with: the best of the selection whose runs
    stayed finite for every seed."""
    out = {}
    for key in chosen:
        out[key] = next((lr for lr in ranking(table, key) if not diverged(args, key, lr)), None)
    return out


def load_curve(d: Path, per_epoch: float) -> dict:
    """The evaluated records: epoch, the averaged model's accuracy and, where recorded,
    the mean over the models held (``node_mean_accuracy``; None where absent)."""
    epochs, acc, node = [], [], []
    for line in (d / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            a = rec.get("accuracy")
            if isinstance(a, (int, float)) and math.isfinite(a):
                epochs.append(round(rec["round"] / per_epoch, 4))
                acc.append(float(a))
                m = rec.get("node_mean_accuracy")
                node.append(float(m) if isinstance(m, (int, float)) else None)
    curve = {"epoch": epochs, "accuracy": acc}
    if any(v is not None for v in node):
        curve["node_mean_accuracy"] = node
    return curve


def last_node_mean(d: Path):
    """The last recorded mean over the models held (``node_mean_accuracy``) of a run, or
    None (a run without it, or not finished)."""
    f = d / "metrics.jsonl"
    if not (d / "summary.json").is_file() or not f.is_file():
        return None
    values = [json.loads(line).get("node_mean_accuracy") for line in f.read_text().splitlines()
              if line.strip()]
    values = [v for v in values if isinstance(v, (int, float))]
    return values[-1] if values else None


def selection_curves(args) -> list:
    """The finished selection runs' curves (seed 0, every step size): what a partial
    report can show before any final run has finished."""
    out = []
    for alpha in args.alphas:
        for method in args.methods:
            for lr in args.lrs:
                d = run_dir(args, "select", method, alpha, lr, args.seeds[0])
                if (d / "summary.json").is_file():
                    out.append({"alpha": alpha, "method": method, "lr": lr,
                                "curve": load_curve(d, rounds_per_epoch(args, method))})
    return out


def report(args, chosen: dict, table: dict, data_md5: dict, wall: float, stem: str = STEM) -> dict:
    import csv

    runs = []
    for alpha in args.alphas:
        for method in args.methods:
            lr = chosen.get((alpha, method))
            if lr is None:  # (every step size diverged, or its selection is not finished)
                continue
            for seed in args.seeds:
                d = run_dir(args, "final", method, alpha, lr, seed)
                if not (d / "summary.json").is_file():
                    continue
                s = json.loads((d / "summary.json").read_text())
                curve = load_curve(d, rounds_per_epoch(args, method))
                node = curve.get("node_mean_accuracy") or [None]
                runs.append({"alpha": alpha, "method": method, "seed": seed, "lr": lr,
                             "k": args.k if METHODS[method][0] == "teleportation" else args.nodes,
                             "topology": METHODS[method][1], "rounds": s.get("rounds_run"),
                             "final_accuracy": s.get("final_accuracy"),
                             "final_node_mean_accuracy": node[-1],
                             "best_accuracy": max(curve["accuracy"]) if curve["accuracy"] else None,
                             # (the run's own: its last start to its end)
                             "wall_time_s": s.get("wall_time_s"),
                             "curve": curve})
    out = Path(args.out)
    # (partial: a --report-only of a sweep still running; the runs finished so far)
    partial = len(runs) < len(args.alphas) * len(args.methods) * len(args.seeds)
    result = {
        "figure": "Figure 3 (Fashion-MNIST half), paper Sec. 5.2",
        "n": args.nodes, "epochs": args.epochs, "select_epochs": args.select_epochs,
        "batch_size": args.batch_size, "momentum": args.momentum, "sampling": "epochs",
        "lr_schedule": args.lr_schedule,
        "eval_every_epochs": args.eval_epochs,
        "model": "LeNet with GroupNorm" if "model" in args.choices else "LeNet-5",
        "recipe": args.recipe_name, "authors_choices": list(args.choices),
        "authors_commit": authors_recipe.AUTHORS_COMMIT if args.choices else None,
        "evaluations": {"accuracy": "the averaged model (mean of the tokens' models)",
                        "node_mean_accuracy": "mean over the models held of each one's test "
                        "accuracy: the n nodes' (DSGD), the k tokens' (Teleportation)"},
        "partial": partial, "teleportation_k": args.k,
        "lr_grid": args.lrs, "alphas": args.alphas, "seeds": args.seeds, "methods": args.methods,
        "lr_selection": {f"alpha={a:g} | {m}": {
            "chosen": chosen.get((a, m)),
            "final_accuracy_by_lr": {f"{lr:g}": acc for lr, acc in sorted(by_lr.items())},
            "final_node_mean_accuracy_by_lr": {f"{lr:g}": last_node_mean(
                run_dir(args, "select", m, a, lr, args.seeds[0])) for lr in sorted(by_lr)}}
            for (a, m), by_lr in table.items()},
        "step_size_used": {f"alpha={a:g} | {m}": lr for (a, m), lr in sorted(chosen.items())},
        "diverged": [{"alpha": a, "method": m, "lr": lr, "seed": seed,
                      "message": json.loads((run_dir(args, "final", m, a, lr, seed) / DIVERGED).read_text())["message"]}
                     for (a, m) in sorted(table) for lr in sorted(table[(a, m)])
                     for seed in diverged(args, (a, m), lr)],
        "selection_curves": selection_curves(args),
        # (this invocation of the script: a --report-only's seconds, or the sweep's since
        # its last start; each run's own is in "runs")
        "data_md5": data_md5, "invocation_s": wall,
        "runs_dir": os.path.relpath(args.runs, out), "runs": runs,
    }
    out.mkdir(parents=True, exist_ok=True)  # (a --report-only into a new folder)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["alpha", "method", "seed", "lr", "k", "epoch", "accuracy", "node_mean_accuracy"])
        for r in runs:
            node = r["curve"].get("node_mean_accuracy") or [None] * len(r["curve"]["epoch"])
            for e, a, m in zip(r["curve"]["epoch"], r["curve"]["accuracy"], node):
                w.writerow([f"{r['alpha']:g}", r["method"], r["seed"], f"{r['lr']:g}", r["k"], e,
                            f"{a:.6f}", "" if m is None else f"{m:.6f}"])
    plot(result, out / f"{stem}.png")
    return result


def _seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def summary_table(result: dict) -> list[str]:
    import numpy as np

    lines = ["| Dirichlet alpha | method | step size | final test accuracy of the averaged "
             "model, mean (min..max) over seeds | mean over the models held |",
             "| ---: | --- | ---: | --- | --- |"]
    for alpha in result["alphas"]:
        for method in result["methods"]:
            rs = [r for r in result["runs"] if r["alpha"] == alpha and r["method"] == method]
            if not rs:
                continue
            a = 100 * np.array([r["final_accuracy"] for r in rs], dtype=float)
            m = [r.get("final_node_mean_accuracy") for r in rs]
            node = ("n/a" if any(v is None for v in m) else
                    f"{100 * np.mean(m):.2f} % ({100 * min(m):.2f}..{100 * max(m):.2f})")
            lines.append(f"| {alpha:g} | {LABELS[method]} | {rs[0]['lr']:g} | {a.mean():.2f} % "
                         f"({a.min():.2f}..{a.max():.2f}, {_seeds(len(rs))}) | {node} |")
    if result.get("partial"):
        lines.append("\nPARTIAL: not every run of the protocol has finished (the report "
                     "covers the finished ones).")
    return lines


def schedule_words(schedule: str) -> str:
    return {"constant": "constant step size",
            "cosine-warmup": "the authors' schedule: 10 warm-up epochs, then a cosine"}.get(schedule, schedule)


def _zoom(ax, shown: list) -> bool:
    """The y axis from just below the lowest value drawn after the run's first tenth: the
    curves' last stretch, where the methods differ by tenths of a point, stays readable
    (the first epochs' rise leaves the axes). False where that would cut nothing."""
    if not shown:
        return False
    last = max(e for e, _ in shown)
    later = [a for e, a in shown if e >= 0.1 * last]
    low = max(0.0, float(int(min(later))) - 1.0)
    if low <= 5.0:
        return False
    ax.set_ylim(low, min(100.0, max(a for _, a in shown) + 1.0))
    return True


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    alphas = sorted(result["alphas"], reverse=True)  # the paper: alpha = 10 first
    keys = [("accuracy", "averaged model")]
    selection = not result["runs"]  # (a partial report before any final run: the selection)
    runs = result["runs"] or [{**c, "seed": 0} for c in result.get("selection_curves", [])]
    if any(r["curve"].get("node_mean_accuracy") for r in runs):
        keys.append(("node_mean_accuracy", "mean over the models held"))
    fig, axes = plt.subplots(len(keys), len(alphas), figsize=(6.2 * len(alphas), 4.4 * len(keys)),
                             squeeze=False)
    colors = {"teleportation": "tab:red", "dsgd-ring": "tab:blue", "dsgd-base2": "tab:green"}
    for row, (key, what) in enumerate(keys):
        for ax, alpha in zip(axes[row], alphas):
            shown = []  # (epoch, accuracy) of every line drawn: the zoom below
            for method in result["methods"]:
                rs = [r for r in runs if r["alpha"] == alpha and r["method"] == method
                      and r["curve"].get(key) and None not in r["curve"][key]]
                if selection:  # one line per step size, seed 0
                    for r, style in zip(rs, ("-", "--", ":")):
                        ax.plot(r["curve"]["epoch"], 100 * np.array(r["curve"][key]), style,
                                color=colors.get(method), label=f"{LABELS[method]}, lr {r['lr']:g}")
                        shown += zip(r["curve"]["epoch"], 100 * np.array(r["curve"][key]))
                    continue
                if not rs:
                    continue
                n = min(len(r["curve"][key]) for r in rs)
                ep = np.array(rs[0]["curve"]["epoch"][:n])
                acc = 100 * np.array([r["curve"][key][:n] for r in rs])
                ax.plot(ep, acc.mean(0), color=colors.get(method),
                        label=f"{LABELS[method]}, lr {rs[0]['lr']:g} ({_seeds(len(rs))})")
                ax.fill_between(ep, acc.min(0), acc.max(0), color=colors.get(method), alpha=0.2, lw=0)
                shown += zip(ep, acc.min(0))
            zoomed = _zoom(ax, shown)
            ax.set_title(f"alpha = {alpha:g} ({'homogeneous' if alpha >= 1 else 'heterogeneous'}): "
                         f"{what}", fontsize=10)
            ax.set_xlabel("epoch")
            ax.set_ylabel("test accuracy (%)" + (", zoomed" if zoomed else ""))
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=8)
    seeds = 1 if selection else len(result["seeds"])
    picked = (f" -- the step-size selection (seed 0, {result['select_epochs']:g} epochs), "
              "no final run yet")
    recipe = "the authors' recipe" if result.get("recipe") == "authors" else (
        f"the authors' {', '.join(result['authors_choices'])}" if result.get("authors_choices")
        else "the paper's table")
    fig.suptitle(f"Fashion-MNIST, {result['model']}, {recipe}\nn = {result['n']} nodes, batch "
                 f"{result['batch_size']}, momentum {result['momentum']:g}, {result['epochs']:g} "
                 f"epochs, {_seeds(seeds)}{', the mean shaded min..max' if seeds > 1 else ''}\n"
                 f"{schedule_words(result.get('lr_schedule', 'constant'))}"
                 f"{chr(10) + 'PARTIAL: finished runs only' if result.get('partial') else ''}"
                 f"{picked if selection else ''}",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.96 if len(keys) > 1 else 0.92))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 0.2-epoch selection and 0.4-epoch final runs, one seed, "
                   "alpha 0.1, written under --out as figure3_fashion_mnist_quick.*")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--runs", default=None, help="runs folder (default OUT/figure3_fashion_mnist_runs)")
    p.add_argument("--data-dir", default=None, help="Fashion-MNIST folder (default: the "
                   "package's search: ./data, then /usr/share/datasets/fashion-mnist)")
    p.add_argument("--workers", type=int, default=2, help="runs at a time (default 2)")
    p.add_argument("--nodes", type=int, default=25)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--epochs", type=float, default=50.0, help="epochs of the final runs "
                   "(default 50; the paper: 200)")
    p.add_argument("--select-epochs", type=float, default=10.0,
                   help="epochs of the one-seed step-size selection runs (default 10)")
    p.add_argument("--eval-epochs", type=float, default=2.0, help="evaluate every E epochs")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--lrs", type=float, nargs="+", default=[0.1, 0.01, 0.001])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.1, 10.0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    p.add_argument("--report-only", action="store_true", help="no new runs: the report of "
                   "the finished ones")
    p.add_argument("--recipe", choices=list(authors_recipe.RECIPES), default="paper",
                   help="paper (default: the paper's table) or authors (the authors' harness: "
                   "balanced Dirichlet shares, LeNet with GroupNorm, random crops)")
    p.add_argument("--authors-choices", nargs="+", default=None,
                   choices=[c for c in authors_recipe.CHOICES if c != "evaluation"],
                   help="some of the authors' choices on their own (instead of --recipe)")
    p.add_argument("--lr-schedule", choices=["constant", "cosine-warmup"], default="constant",
                   help="the final runs' step-size schedule: constant (default, the paper's "
                   "table) or cosine-warmup (the authors' harness); the selection stays "
                   "constant, the runs go under final-<schedule>/, the report to "
                   "<stem>_<schedule>.*")
    args = p.parse_args(argv)
    if args.authors_choices is not None and args.recipe != "paper":
        p.error("give --recipe authors or --authors-choices, not both")
    args.choices = tuple(c for c in authors_recipe.RECIPES[args.recipe] if c != "evaluation")
    if args.authors_choices is not None:
        args.choices = authors_recipe.check_choices(args.authors_choices)
    args.recipe_name = ("authors" if args.recipe == "authors" else
                        "paper" if not args.choices else "authors:" + "+".join(args.choices))
    stem = STEM if not args.choices else STEM + (
        "_authors" if args.recipe == "authors" else "_" + "-".join(args.choices))
    if args.quick:
        args.epochs, args.select_epochs, args.eval_epochs = 0.4, 0.2, 0.1
        args.seeds, args.alphas = args.seeds[:1], args.alphas[:1]
    if args.runs is None:
        args.runs = str(Path(args.out) / (stem + ("_quick" if args.quick else "") + "_runs"))
    if args.lr_schedule != "constant":  # (after the runs folder: one selection for both)
        stem += f"_{args.lr_schedule}"

    from mpi_teleport.measure import DatasetMissingError
    from mpi_teleport.measure import datasets, fashion_files

    try:  # (before anything runs or is written: the data's one line, status 2)
        data_md5 = fashion_files.data_md5(datasets.fashion_mnist_paths(args.data_dir))
    except DatasetMissingError as exc:
        print(f"{Path(__file__).name}: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    t0 = time.perf_counter()
    chosen, table = choose_lrs(args) if not args.report_only else _chosen_from_disk(args)
    for (alpha, method), lr in sorted(chosen.items()):
        print(f"alpha={alpha:g} {method}: step size {lr:g} (selection: "
              + ", ".join(f"{l:g} -> {100 * a:.2f}%" for l, a in sorted(table[(alpha, method)].items())) + ")",
              flush=True)
    if not args.report_only:
        final_runs(args, chosen, table)
    chosen = used_lrs(args, chosen, table)
    result = report(args, chosen, table, data_md5, time.perf_counter() - t0,
                    stem + ("_quick" if args.quick else ""))
    print("\n".join(summary_table(result)))
    return 0


def _chosen_from_disk(args) -> tuple:
    table = {}
    for alpha in args.alphas:
        for method in args.methods:
            for lr in args.lrs:
                f = run_dir(args, "select", method, alpha, lr, args.seeds[0]) / "summary.json"
                if f.is_file():
                    acc = json.loads(f.read_text()).get("final_accuracy")
                    table.setdefault((alpha, method), {})[lr] = acc if isinstance(acc, (int, float)) else -1.0
    # (a step size is chosen only once its whole grid has run: a partial report shows none)
    return {key: max(sorted(v), key=lambda lr: (v[lr], lr)) for key, v in table.items()
            if len(v) == len(args.lrs)}, table


if __name__ == "__main__":
    sys.exit(main())
