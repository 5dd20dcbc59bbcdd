"""The paper's Figure 4 (Sec. 5.3) on the offline ``digits`` problem: test accuracy
against wall-clock time under the heterogeneous network tau * mod(|i - j|, 24) us,
through the virtual clock.

    python benchmarks/bench_figure4.py [--quick] [--epochs E] [--seeds 0 1 2]
                                       [--compute-times 20 200 2000] [--keep] [--check-mpi]

Setting (paper Sec. 5.3 and App. "Experimental Setup", Fashion-MNIST/LeNet replaced by
scikit-learn's bundled 8x8 digits and a 6,090-parameter CNN, so that it runs offline on a
laptop): n = 25 nodes, Dirichlet alpha in {0.1, 10}, three seeds, batch 32, momentum 0.9,
step sizes {0.1, 0.01, 0.001} (every one is run; plots and the table keep, per method and
alpha, the one with the best mean final accuracy, as the paper reports the best of its
grid), the same number of epochs for every method (``--epochs``), and three methods:

* Teleportation, k = 8 active nodes, ring over the tokens (the paper does not state k for
  Figs. 3/4; 8 is the project's choice for Figure 3, ``jobs/figure3.sbatch``);
* Decentralized SGD on the latency-optimal ring 0-1-...-24-0 (node m on ring position m:
  every link costs tau, the wrap-around 24-0 costs tau * (24 mod 24) = 0);
* Decentralized SGD on the Base-2 Graph (links of every length, up to 23 tau).

Latency changes time, never numbers: one training run per (alpha, method, step size,
seed) serves every tau and every compute time. Its ``metrics.jsonl`` (simulator, one
process) gives the accuracy per logged round; :func:`virtual_times` replays the virtual
clock of that run for each tau in {0, 5} us and each compute time per local step -- the
one measured here for a digits gradient step and a sweep (default 20 us to 5 ms) -- so the
crossover between "compute dominates" and "delay dominates" is visible. Every run is
trained with ``--latency mod:5 --clock virtual --compute-time 20`` and its recorded
``virtual_time_s`` must equal the replay's (checked, reported in the JSON).
``--check-mpi`` runs a few rounds of each method on 4 MPI ranks (``mpirun``, virtual
clock, tau = 5) and checks that the records (accuracy, loss, consensus, virtual_time_s)
equal the simulator's and the replay's.

Writes into --out (default benchmarks/results), stem ``figure4`` (``--quick``:
``figure4_quick``): ``<stem>_runs/`` (the runs), ``<stem>.csv`` (one row per alpha, tau,
compute time, method and step size: final accuracy, time to 90/92/95 %),
``<stem>_curves.csv`` (mean curves of the best step sizes), ``<stem>.json`` (settings,
measured compute time, who is first to each level, the checks), ``<stem>.png`` (the
paper's layout: accuracy against virtual time, one panel per alpha and tau, at the
measured compute time), ``<stem>_sweep.png`` (the same for every compute time) and
``<stem>_crossover.png`` (time to each accuracy level against compute time per step).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

METHODS = {  # key: (label, algorithm, topology)
    "teleportation": ("Teleportation (k={k}, ring)", "teleportation", "ring"),
    "dsgd-ring": ("DSGD, ring 0-1-...-{last}-0", "dsgd", "ring"),
    "dsgd-base2": ("DSGD, Base-2 Graph", "dsgd", "base2"),
}
COLORS = {"teleportation": "tab:red", "dsgd-ring": "tab:blue", "dsgd-base2": "tab:green"}
N_TRAIN_DIGITS = 1293  # 1797 samples: 80 % train part, minus 10 % validation
REFERENCE = {"tau_us": 5.0, "compute_us": 20.0}  # the clock every training run records
LEVELS = (0.90, 0.92, 0.95)  # digits; --levels for other problems


def label(method: str, k: int, nodes: int) -> str:
    return METHODS[method][0].format(k=k, last=nodes - 1)


def run_flags(args, method: str, alpha: float, lr: float, seed: int) -> list[str]:
    """Flags of one training run (without --out); the same for the simulator and MPI."""
    _, algorithm, topology = METHODS[method]
    # every method evaluates every R rounds, R from DSGD's (shortest) run, so that the time
    # to a level is resolved equally finely for all (Teleportation then evaluates n/k
    # times more often than --points)
    dsgd_rounds = math.ceil(args.epochs * N_TRAIN_DIGITS / (args.batch_size * args.nodes))
    flags = ["--nodes", str(args.nodes), "--problem", "digits", "--algorithm", algorithm,
             "--topology", topology, "--epochs", f"{args.epochs:g}", "--batch-size",
             str(args.batch_size), "--lr", f"{lr:g}", "--momentum", f"{args.momentum:g}",
             "--alpha", f"{alpha:g}", "--seed", str(seed),
             "--log-every", str(max(1, dsgd_rounds // args.points)), "--progress", "off",
             "--latency", f"mod:{REFERENCE['tau_us']:g}", "--clock", "virtual",
             "--compute-time", f"{REFERENCE['compute_us']:g}"]
    if algorithm == "teleportation":
        flags += ["--k", str(args.k)]
    return flags


def simulate(flags: list[str]) -> None:
    from mpi_teleport.measure import sim

    with contextlib.redirect_stdout(io.StringIO()):
        rc = sim.main(flags)
    if rc != 0:
        raise RuntimeError(f"python -m mpi_teleport.sim {' '.join(flags)} exited {rc}")


def virtual_times(run_cfg: dict, rounds: list[int], tau_us: float, compute_us: float) -> list[float]:
    """The virtual clock (``virtual_time_s``) of one run at the given logged rounds, had it
    run under ``mod:tau_us`` with ``compute_us`` per local step.

    The run's numbers do not depend on the network or the compute time, only its clock
    does, and the clock depends only on the schedule (seed, n, k, topology, momentum,
    variant): so one training run is replayed here for every (tau, compute time). This is
    the one place that knows how the simulator computes the clock
    (``mpi_teleport.latency.virtual_clock.for_run`` on the run's RunSpec)."""
    from mpi_teleport.measure import run_spec
    from mpi_teleport.measure import resolve
    from mpi_teleport.measure import LatencySettings
    from mpi_teleport.measure import for_run

    keys = ("nodes", "algorithm", "variant", "k", "topology", "momentum", "seed")
    cfg = resolve({**{key: run_cfg[key] for key in keys if key in run_cfg},
                   "rounds": max([1, *rounds]), "latency": f"mod:{tau_us:g}",
                   "clock": "virtual", "compute_time": compute_us})
    algorithm = run_cfg["algorithm"]
    k = cfg.nodes if algorithm == "dsgd" else cfg.k
    latency = LatencySettings(cfg.latency, cfg.clock, cfg.compute_time)
    oracle = for_run(run_spec(cfg, algorithm, k), latency, dim=1, itemsize=4)  # mod: no bandwidth
    out = []
    for r in rounds:
        oracle.advance_to(r)
        out.append(oracle.time_s())
    return out


def measure_compute_us(repeats: int = 5, calls: int = 200) -> float:
    """One digits gradient step (batch 32, one node) on this machine (:func:`step_time_us`)."""
    from mpi_teleport.measure import problem_of
    from mpi_teleport.measure import resolve
    from mpi_teleport.measure import make_problem

    return step_time_us(make_problem(problem_of(resolve({"nodes": 25, "problem": "digits"}))), repeats, calls)


def step_time_us(problem, repeats: int = 5, calls: int = 200, nodes: int = 25) -> float:
    """One gradient step of ``problem`` (one node) on this machine: the 25th percentile of
    the per-call times, the smallest over a few repeats (background load only adds time)."""
    x = problem.initial()[None, :]
    out = np.zeros_like(x)
    quartiles = []
    for _ in range(repeats):
        times = []
        for t in range(calls):
            start = time.perf_counter()
            problem.gradient([t % nodes], x, t, out=out)
            times.append(time.perf_counter() - start)
        quartiles.append(float(np.percentile(times, 25)))
    return round(min(quartiles) * 1e6, 1)


def run_dir(runs: Path, method: str, alpha: float, lr: float, seed: int) -> Path:
    return runs / f"alpha{alpha:g}" / method / f"lr{lr:g}" / f"seed{seed}"


def train(args, runs: Path) -> float:
    """Every (alpha, method, step size, seed) once; returns the wall time spent."""
    spent = 0.0
    for alpha in args.alphas:
        for method in args.methods:
            for lr in args.lrs:
                for seed in args.seeds:
                    d = run_dir(runs, method, alpha, lr, seed)
                    if args.keep and (d / "summary.json").is_file():
                        continue
                    shutil.rmtree(d, ignore_errors=True)
                    t0 = time.perf_counter()
                    simulate(run_flags(args, method, alpha, lr, seed) + ["--out", str(d)])
                    spent += time.perf_counter() - t0
                    s = json.loads((d / "summary.json").read_text())
                    print(f"alpha={alpha:g} {method:13s} lr={lr:g} seed={seed}: "
                          f"{s['rounds_run']:5d} rounds, final accuracy "
                          f"{100 * s['final_accuracy']:.2f}% ({time.perf_counter() - t0:.0f} s)",
                          flush=True)
    return spent


def load(d: Path) -> dict:
    cfg = json.loads((d / "config.json").read_text())
    with open(d / "metrics.jsonl") as f:
        recs = [json.loads(line) for line in f]
    return {"cfg": cfg, "rounds": [r["round"] for r in recs],
            "accuracy": np.array([r["accuracy"] for r in recs]),
            "recorded_virtual_time_s": [r.get("virtual_time_s") for r in recs]}


def first_time(times: np.ndarray, acc: np.ndarray, level: float):
    hit = np.nonzero(acc >= level)[0]
    return float(times[hit[0]]) if len(hit) else None


def analyse(args, runs_dir: Path, compute_times: list[float]):
    """Mean curves over seeds per (alpha, method, lr, tau, compute time), times to each
    level, the best step size per (alpha, method); and the replay check."""
    rows, curves, best, replay_ok = [], {}, {}, True
    for alpha in args.alphas:
        for method in args.methods:
            finals = {}
            for lr in args.lrs:
                runs = [load(run_dir(runs_dir, method, alpha, lr, s)) for s in args.seeds]
                rounds = runs[0]["rounds"]
                if any(r["rounds"] != rounds for r in runs):
                    raise RuntimeError(f"alpha={alpha:g} {method} lr={lr:g}: seeds logged "
                                       "different rounds")
                acc = np.stack([r["accuracy"] for r in runs])
                for r in runs:  # the replay reproduces the clock the run recorded
                    replay_ok &= virtual_times(r["cfg"], rounds, REFERENCE["tau_us"],
                                               REFERENCE["compute_us"]) == r["recorded_virtual_time_s"]
                finals[lr] = float(acc[:, -1].mean())
                active = args.nodes if METHODS[method][1] == "dsgd" else args.k
                epochs = np.array(rounds) * args.batch_size * active / N_TRAIN_DIGITS
                for tau in args.taus:
                    for c in compute_times:
                        times = np.array([virtual_times(r["cfg"], rounds, tau, c) for r in runs])
                        mean_t, mean_a = times.mean(axis=0), acc.mean(axis=0)
                        curves[(alpha, tau, c, method, lr)] = {
                            "round": rounds, "epoch": epochs, "time_s": mean_t, "mean": mean_a,
                            "min": acc.min(axis=0), "max": acc.max(axis=0)}
                        row = {"alpha": alpha, "tau_us": tau, "compute_us": c, "method": method,
                               "lr": lr, "seeds": len(runs), "epochs": args.epochs,
                               "rounds": rounds[-1], "final_accuracy_mean": finals[lr],
                               "final_accuracy_min": float(acc[:, -1].min()),
                               "final_accuracy_max": float(acc[:, -1].max()),
                               "virtual_time_total_s": float(mean_t[-1]),
                               "virtual_time_per_round_us": float(mean_t[-1] / rounds[-1] * 1e6)}
                        for level in args.levels:
                            row[f"time_to_{round(100 * level)}_s"] = first_time(mean_t, mean_a, level)
                        rows.append(row)
            best[(alpha, method)] = max(args.lrs, key=lambda lr: (finals[lr], -lr))
    for row in rows:
        row["best_lr"] = row["lr"] == best[(row["alpha"], row["method"])]
    return rows, curves, best, replay_ok


MEASURED_BY_RANKS = "measured by each rank"


def analyse_job(args, job: Path):
    """The finished runs of jobs/figure4.sbatch (``tau<T>/alpha<A>/lr<LR>/seed<S>/<method>``,
    each with its own recorded ``virtual_time_s``): the same rows, curves and best step sizes
    as :func:`analyse`, with the compute time the runs used (modelled or measured)."""
    groups = {}
    for summary in sorted(job.glob("tau*/alpha*/lr*/seed*/*/summary.json")):
        d = summary.parent
        method = d.name
        if method not in METHODS:
            continue
        run = load(d)
        cfg = run["cfg"]
        tau = float(d.parents[3].name[len("tau"):])
        key = (float(cfg["alpha"]), tau, method, float(cfg["lr"]))
        groups.setdefault(key, []).append(run)
    if not groups:
        raise ValueError(f"no finished run (summary.json) under {job}/tau*/alpha*/lr*/seed*/"
                         "<method>; run jobs/figure4.sbatch first (it writes that layout)")
    any_cfg = next(iter(groups.values()))[0]["cfg"]
    c = any_cfg.get("compute_time") or MEASURED_BY_RANKS
    args.alphas = sorted({a for a, _, _, _ in groups})
    args.taus = sorted({t for _, t, _, _ in groups})
    args.methods = [m for m in METHODS if any(k[2] == m for k in groups)]
    args.lrs = sorted({lr for _, _, _, lr in groups}, reverse=True)
    args.nodes, args.k = any_cfg["nodes"], next(
        (g[0]["cfg"]["k"] for (_, _, m, _), g in groups.items() if m == "teleportation"), args.k)
    args.epochs = any_cfg.get("epochs")
    args.seeds = sorted({g["cfg"]["seed"] for runs in groups.values() for g in runs})
    rows, curves, finals = [], {}, {}
    for (alpha, tau, method, lr), runs in sorted(groups.items()):
        length = min(len(r["rounds"]) for r in runs)
        rounds = runs[0]["rounds"][:length]
        acc = np.stack([r["accuracy"][:length] for r in runs])
        times = np.array([r["recorded_virtual_time_s"][:length] for r in runs], dtype=float)
        mean_t, mean_a = times.mean(axis=0), acc.mean(axis=0)
        finals.setdefault((alpha, method, lr), []).extend(acc[:, -1].tolist())
        curves[(alpha, tau, c, method, lr)] = {
            "round": rounds, "epoch": np.array(rounds, dtype=float), "time_s": mean_t,
            "mean": mean_a, "min": acc.min(axis=0), "max": acc.max(axis=0)}
        row = {"alpha": alpha, "tau_us": tau, "compute_us": c, "method": method, "lr": lr,
               "seeds": len(runs), "epochs": args.epochs, "rounds": rounds[-1],
               "final_accuracy_mean": float(acc[:, -1].mean()),
               "final_accuracy_min": float(acc[:, -1].min()),
               "final_accuracy_max": float(acc[:, -1].max()),
               "virtual_time_total_s": float(mean_t[-1]),
               "virtual_time_per_round_us": float(mean_t[-1] / max(1, rounds[-1]) * 1e6)}
        for level in args.levels:
            row[f"time_to_{round(100 * level)}_s"] = first_time(mean_t, mean_a, level)
        rows.append(row)
    best = {}
    for alpha in args.alphas:
        for method in args.methods:
            options = {lr: float(np.mean(v)) for (a, m, lr), v in finals.items()
                       if a == alpha and m == method}
            if options:
                best[(alpha, method)] = max(options, key=lambda lr: (options[lr], -lr))
    for row in rows:
        row["best_lr"] = row["lr"] == best.get((row["alpha"], row["method"]))
    return rows, curves, best, c


def from_job(args) -> int:
    """Tables and the figure of a jobs/figure4.sbatch output directory, written into it."""
    job = Path(args.from_job)
    try:
        rows, curves, best, c = analyse_job(args, job)
    except ValueError as err:
        print(f"bench_figure4.py: error: {err}", file=sys.stderr)
        return 2
    table = winners(args, rows, [c])
    write_csv(job / "figure4.csv", rows)
    write_csv(job / "figure4_curves.csv", curve_rows(curves, best))
    plot_panels(args, curves, best, [c], job / "figure4.png",
                f"Figure 4: n = {args.nodes}, delay tau * mod(|i-j|, 24) us, {args.epochs} epochs, "
                f"batch 32, momentum 0.9, best lr of {'/'.join(f'{x:g}' for x in args.lrs)}, "
                f"seeds {args.seeds} (mean; band min..max), compute {compute_name(c)}")
    md = markdown(args, table, None)
    (job / "figure4.json").write_text(json.dumps({
        "job": str(job), "nodes": args.nodes, "k": args.k, "epochs": args.epochs,
        "taus_us": args.taus, "alphas": args.alphas, "lrs": args.lrs, "seeds": args.seeds,
        "methods": args.methods, "compute": c, "levels": list(args.levels),
        "best_lr": {f"alpha={a:g} | {m}": lr for (a, m), lr in best.items()},
        "first_to_level": table, "table_markdown": md}, indent=2) + "\n")
    print("\n".join(md))
    print(f"wrote {job}/figure4.{{csv,json,png}}, figure4_curves.csv")
    return 0


def winners(args, rows, compute_times):
    """Per (alpha, tau, compute time, level): the methods' times (best step sizes), first
    the fastest; None where a method never reaches the level."""
    table = []
    for alpha in args.alphas:
        for tau in args.taus:
            for c in compute_times:
                picked = [r for r in rows if r["alpha"] == alpha and r["tau_us"] == tau
                          and r["compute_us"] == c and r["best_lr"]]
                entry = {"alpha": alpha, "tau_us": tau, "compute_us": c, "levels": {}}
                for level in args.levels:
                    key = f"time_to_{round(100 * level)}_s"
                    times = {r["method"]: r[key] for r in picked}
                    reached = sorted((t, m) for m, t in times.items() if t is not None)
                    entry["levels"][f"{round(100 * level)}"] = {
                        "first": reached[0][1] if reached else None, "times_s": times}
                entry["final_accuracy"] = {r["method"]: r["final_accuracy_mean"] for r in picked}
                entry["total_time_s"] = {r["method"]: r["virtual_time_total_s"] for r in picked}
                table.append(entry)
    return table


def compute_name(c) -> str:
    """A compute time per step in us, or MEASURED_BY_RANKS (a job's runs measured theirs)."""
    return c if isinstance(c, str) else f"{c:g} us"


def fmt_time(t) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s"


def markdown(args, table, measured: float) -> list[str]:
    short = {"teleportation": "Tele", "dsgd-ring": "ring", "dsgd-base2": "base2"}
    lines = ["| alpha | tau | compute/step | " + " | ".join(
        f"to {lvl} %: first (" + " / ".join(short[m] for m in args.methods) + ")"
        for lvl in (round(100 * x) for x in args.levels)) + " |",
        "| ---: | ---: | ---: | " + " | ".join("---" for _ in args.levels) + " |"]
    for e in table:
        c = e["compute_us"]
        cname = compute_name(c) + (" (measured)" if c == measured else "")
        cells = []
        for lvl, v in e["levels"].items():
            first = short[v["first"]] if v["first"] else "none"
            cells.append(f"**{first}** (" + " / ".join(fmt_time(v["times_s"][m])
                                                        for m in args.methods) + ")")
        lines.append(f"| {e['alpha']:g} | {e['tau_us']:g} us | {cname} | " + " | ".join(cells) + " |")
    return lines


def plot_panels(args, curves, best, compute_times, path: Path, title: str) -> None:
    """Accuracy against virtual time, columns alpha = 10 then 0.1 as in the paper. One
    compute time: rows tau = 5 (the paper's Fig. 4) then tau = 0 (its appendix twin); several:
    one row per compute time, columns (alpha, tau)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alphas, taus = sorted(args.alphas, reverse=True), sorted(args.taus, reverse=True)
    if len(compute_times) == 1:
        grid = [[(compute_times[0], a, t) for a in alphas] for t in taus]
    else:
        grid = [[(c, a, t) for t in taus for a in alphas] for c in compute_times]
    fig, axes = plt.subplots(len(grid), len(grid[0]), squeeze=False,
                             figsize=(4.6 * len(grid[0]), 3.4 * len(grid)))
    for i, row in enumerate(grid):
        for j, (c, alpha, tau) in enumerate(row):
            ax = axes[i][j]
            for method in args.methods:
                lr = best.get((alpha, method))
                cv = curves.get((alpha, tau, c, method, lr))
                if cv is None:  # a job's partial results
                    continue
                x = cv["time_s"]
                ax.plot(x, 100 * cv["mean"], color=COLORS[method],
                        label=f"{label(method, args.k, args.nodes)}, lr {lr:g}")
                ax.fill_between(x, 100 * cv["min"], 100 * cv["max"], color=COLORS[method], alpha=0.15)
            ax.set_ylim(max(0, 100 * min(args.levels) - 20), 100)
            ax.set_title(f"alpha = {alpha:g}, tau = {tau:g} us, compute {compute_name(c)}/step",
                         fontsize=9)
            ax.set_xlabel("virtual wall-clock time (s)")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=7, loc="lower right")
    wrapped = "\n".join(textwrap.fill(line, int(14 * fig.get_figwidth()))
                         for line in title.splitlines())
    fig.suptitle(wrapped, fontsize=9)
    top = 0.2 + 0.16 * wrapped.count("\n")  # inches of title
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_crossover(args, rows, compute_times, measured: float, path: Path, title: str) -> None:
    """Time to each accuracy level against compute time per step (best step sizes); a
    method missing from a panel never reached that level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    cols = [(a, t) for t in sorted(args.taus, reverse=True) for a in sorted(args.alphas, reverse=True)]
    fig, axes = plt.subplots(len(args.levels), len(cols), squeeze=False,
                             figsize=(4.2 * len(cols), 3.2 * len(args.levels)))
    xs = sorted(compute_times)
    for i, level in enumerate(args.levels):
        key = f"time_to_{round(100 * level)}_s"
        for j, (alpha, tau) in enumerate(cols):
            ax = axes[i][j]
            plotted = 0
            for method in args.methods:
                pts = {r["compute_us"]: r[key] for r in rows if r["alpha"] == alpha
                       and r["tau_us"] == tau and r["method"] == method and r["best_lr"]}
                x = [c for c in xs if pts.get(c) is not None]
                plotted += len(x)
                ax.plot(x, [pts[c] for c in x], "o-", ms=3, color=COLORS[method],
                        label=label(method, args.k, args.nodes))
            ax.axvline(measured, color="gray", ls=":", lw=1)
            ax.set_xscale("log")
            ax.set_xlim(xs[0] / 1.5, xs[-1] * 1.5)
            ax.xaxis.set_minor_formatter(NullFormatter())
            if plotted:  # a log axis needs a positive value
                ax.set_yscale("log")
                ax.yaxis.set_minor_formatter(NullFormatter())
            else:
                ax.text(0.5, 0.5, "no method reached this level", ha="center",
                        transform=ax.transAxes, fontsize=8)
            ax.set_title(f"to {100 * level:g} %: alpha = {alpha:g}, tau = {tau:g} us", fontsize=9)
            ax.set_xlabel("compute time per step (us; dotted: measured)")
            ax.set_ylabel("virtual time to level (s)")
            ax.grid(alpha=0.3, which="both")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    wrapped = "\n".join(textwrap.fill(line, int(14 * fig.get_figwidth()))
                         for line in title.splitlines())
    fig.suptitle(wrapped, fontsize=9)
    top = 0.2 + 0.16 * wrapped.count("\n")  # inches of title
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def curve_rows(curves, best) -> list[dict]:
    out = []
    for (alpha, tau, c, method, lr), cv in curves.items():
        if best[(alpha, method)] != lr:
            continue
        for i, r in enumerate(cv["round"]):
            out.append({"alpha": alpha, "tau_us": tau, "compute_us": c, "method": method,
                        "lr": lr, "round": r, "epoch": round(float(cv["epoch"][i]), 4),
                        "virtual_time_s": float(cv["time_s"][i]),
                        "accuracy_mean": float(cv["mean"][i]), "accuracy_min": float(cv["min"][i]),
                        "accuracy_max": float(cv["max"][i])})
    return out


def check_mpi(args, work: Path, ranks: int = 4, rounds: int = 6, compute_us: float = 200.0) -> dict:
    """A few rounds of each method on ``ranks`` MPI ranks (virtual clock, tau = 5): the
    records must equal the simulator's (time_s aside) and virtual_time_s the replay's."""
    from mpi_teleport.measure import find_mpirun, mpi_env, mpirun_command

    env = mpi_env()
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    shutil.rmtree(work, ignore_errors=True)
    result = {"ranks": ranks, "rounds": rounds, "tau_us": 5.0, "compute_us": compute_us,
              "methods": {}}
    for method in args.methods:
        _, algorithm, topology = METHODS[method]
        flags = ["--nodes", str(ranks), "--problem", "digits", "--algorithm", algorithm,
                 "--topology", topology, "--rounds", str(rounds), "--lr", "0.1", "--momentum",
                 f"{args.momentum:g}", "--alpha", "0.1", "--seed", "0", "--log-every", "2",
                 "--progress", "off", "--latency", "mod:5", "--clock", "virtual",
                 "--compute-time", f"{compute_us:g}"]
        if algorithm == "teleportation":
            flags += ["--k", str(ranks // 2)]
        simulate(flags + ["--out", str(work / method / "sim")])
        cmd = mpirun_command(ranks, [sys.executable, "-m", "mpi_teleport.run", *flags[2:],
                                     "--out", str(work / method / "mpi")], find_mpirun())
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["mpirun failed"])[-1]
            result["methods"][method] = {"ok": False, "error": tail}
            continue

        def records(d):
            with open(d / "metrics.jsonl") as f:
                return [{k: v for k, v in json.loads(line).items() if k != "time_s"} for line in f]

        mpi, sim = records(work / method / "mpi"), records(work / method / "sim")
        cfg = json.loads((work / method / "sim" / "config.json").read_text())
        replay = virtual_times(cfg, [r["round"] for r in sim], 5.0, compute_us)
        result["methods"][method] = {
            "records_equal": mpi == sim, "virtual_time_equal_replay":
                [r["virtual_time_s"] for r in mpi] == replay,
            "records": len(mpi), "final_accuracy": mpi[-1]["accuracy"],
            "virtual_time_s": mpi[-1]["virtual_time_s"]}
        result["methods"][method]["ok"] = (result["methods"][method]["records_equal"]
                                           and result["methods"][method]["virtual_time_equal_replay"])
    shutil.rmtree(work, ignore_errors=True)
    result["ok"] = all(m["ok"] for m in result["methods"].values())
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a few epochs, one seed, one step size, two compute times (seconds)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--nodes", type=int, default=25)
    p.add_argument("--k", type=int, default=8, help="Teleportation's active nodes (default 8)")
    p.add_argument("--epochs", type=float, default=None, help="epochs for every method "
                   "(default 200 as in the paper; --quick: 2)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lrs", type=float, nargs="+", default=None,
                   help="step sizes (default 0.1 0.01 0.001, the paper's grid)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.1, 10.0])
    p.add_argument("--taus", type=float, nargs="+", default=[0.0, 5.0], help="us (default 0 5)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    p.add_argument("--compute-times", type=float, nargs="+", default=None,
                   help="compute time per step to sweep, us, besides the measured one "
                   "(default 20 50 200 500 2000 5000)")
    p.add_argument("--points", type=int, default=None,
                   help="evaluations of a DSGD run, about; every method evaluates every "
                   "rounds(DSGD) / POINTS rounds (default 100; --quick 10)")
    p.add_argument("--levels", type=float, nargs="+", default=list(LEVELS),
                   help="accuracy levels for the time-to-level table (default 0.9 0.92 0.95)")
    p.add_argument("--from-job", metavar="DIR", default=None,
                   help="only tabulate and plot the runs of jobs/figure4.sbatch in DIR "
                   "(tau*/alpha*/lr*/seed*/<method>), into DIR/figure4.{csv,json,png}")
    p.add_argument("--keep", action="store_true", help="reuse finished runs (summary.json)")
    p.add_argument("--measured-us", type=float, default=None, metavar="US",
                   help="do not time a gradient step; use US as the measured compute time "
                   "(to redraw earlier runs with --keep: the value in <stem>.json)")
    p.add_argument("--check-mpi", action="store_true",
                   help="also check MPI (4 ranks, a few rounds) == simulator == replay")
    args = p.parse_args(argv)
    args.levels = tuple(args.levels)
    if not all(0 < x <= 1 for x in args.levels):
        p.error(f"--levels are accuracies in (0, 1], got {list(args.levels)}")
    if args.from_job is not None:
        if not Path(args.from_job).is_dir():
            p.error(f"--from-job {args.from_job}: no such directory")
        return from_job(args)
    q = args.quick
    args.epochs = args.epochs if args.epochs is not None else (2.0 if q else 200.0)
    args.lrs = args.lrs or ([0.1] if q else [0.1, 0.01, 0.001])
    args.seeds = args.seeds if args.seeds is not None else ([0] if q else [0, 1, 2])
    args.points = args.points or (10 if q else 100)
    sweep = args.compute_times or ([20.0, 2000.0] if q else [20.0, 50.0, 200.0, 500.0, 2000.0, 5000.0])
    if args.k > args.nodes or args.k < 1:
        p.error(f"--k must be between 1 and --nodes ({args.nodes}), got {args.k}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "figure4_quick" if q else "figure4"
    runs_dir = out / f"{stem}_runs"
    started = time.perf_counter()
    if args.measured_us is not None:
        measured = args.measured_us
        print(f"digits gradient step as given (--measured-us): {measured:g} us", flush=True)
    else:
        measured = measure_compute_us(repeats=2 if q else 5)
        print(f"measured digits gradient step: {measured:g} us", flush=True)
    earlier = out / f"{stem}.json"  # --keep: the reused runs' training time counts too
    reused_s = (json.loads(earlier.read_text()).get("train_wall_s", 0.0)
                if args.keep and earlier.is_file() else 0.0)
    train_s = train(args, runs_dir) + reused_s
    compute_times = sorted({measured, *sweep})
    rows, curves, best, replay_ok = analyse(args, runs_dir, compute_times)
    table = winners(args, rows, compute_times)

    write_csv(out / f"{stem}.csv", rows)
    write_csv(out / f"{stem}_curves.csv", curve_rows(curves, best))
    setting = (f"digits, n = {args.nodes}, delay tau * mod(|i-j|, 24) us, {args.epochs:g} epochs "
               f"each,\nbatch {args.batch_size}, momentum {args.momentum:g}, best lr of "
               f"{'/'.join(f'{x:g}' for x in args.lrs)}, mean over {len(args.seeds)} seed(s) "
               "(band: min..max)")
    plot_panels(args, curves, best, [measured], out / f"{stem}.png",
                f"Figure 4 analogue: {setting}; compute {measured:g} us/step (measured)")
    plot_panels(args, curves, best, compute_times, out / f"{stem}_sweep.png",
                f"Figure 4 analogue for every compute time per step: {setting}")
    plot_crossover(args, rows, compute_times, measured, out / f"{stem}_crossover.png",
                   "Time to " + " / ".join(f"{100 * x:g}" for x in args.levels) + " % test "
                   f"accuracy (mean curve) against compute time per step: {setting}")
    md = markdown(args, table, measured)
    summary = {
        "nodes": args.nodes, "k": args.k, "epochs": args.epochs, "lrs": args.lrs,
        "momentum": args.momentum, "batch_size": args.batch_size, "alphas": args.alphas,
        "taus_us": args.taus, "seeds": args.seeds, "methods": args.methods,
        "labels": {m: label(m, args.k, args.nodes) for m in args.methods},
        "measured_compute_us": measured, "compute_times_us": compute_times,
        "levels": list(args.levels),
        "best_lr": {f"alpha={a:g} | {m}": lr for (a, m), lr in best.items()},
        "replay_equals_recorded_virtual_time": replay_ok, "reference_clock": REFERENCE,
        "first_to_level": table, "table_markdown": md,
        "train_wall_s": round(train_s, 1),
    }
    if args.check_mpi:
        summary["mpi_check"] = check_mpi(args, out / f"{stem}_mpi_check")
        print(f"MPI check: {json.dumps(summary['mpi_check'])}", flush=True)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    (out / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("\n".join(md))
    print(f"replay of the virtual clock equals every run's record: {replay_ok}")
    print(f"wrote {out / stem}.{{csv,json,png}}, {stem}_curves.csv, {stem}_sweep.png, "
          f"{stem}_crossover.png ({summary['wall_s']:.0f} s)")
    ok = replay_ok and summary.get("mpi_check", {"ok": True})["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
