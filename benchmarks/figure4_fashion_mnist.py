"""The paper's Figure 4 (Sec. 5.3) on the real Fashion-MNIST: test accuracy against time
under the heterogeneous network tau * mod(|i - j|, 24) us, tau = 5 (and tau = 0, the
appendix's figure), from the Figure 3 runs.

    python benchmarks/figure4_fashion_mnist.py [--runs DIR] [--compute-us US] [--levels 0.8 0.85]

Latency changes time, never numbers: every Figure 3 run (``figure3_fashion_mnist.py``: LeNet,
n = 25, alpha in {0.1, 10}, batch 32, momentum 0.9, the same epochs for every method, step
size chosen from {0.1, 0.01, 0.001}, 3 seeds) was trained with ``--latency mod:5 --clock
virtual --compute-time 20``, and its virtual clock depends only on the schedule (seed, n, k,
topology, momentum). So this script replays each run's clock
(``bench_figure4.virtual_times``) for tau in {5, 0} us and a compute time per local step
measured here for a LeNet gradient (batch 32, one node, one thread), after checking that the
replay reproduces the ``virtual_time_s`` each run recorded. The methods are the paper's:
Teleportation (k = 8, ring over the tokens), DSGD on the latency-optimal ring 0-1-...-24-0
(every link tau), DSGD on the Base-2 Graph (links of every length, up to 23 tau).

Writes ``benchmarks/results/figure4_fashion_mnist.{json,csv,png}``: per alpha, tau and method
the mean curve over seeds (accuracy against virtual time), the time at which the mean curve
first reaches each ``--levels`` accuracy, the time the run ends, and who is first, at the
measured compute time and at a sweep of others (``--sweep-us``: GPU-like steps, where the
delays weigh more).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_figure4  # noqa: E402  (virtual_times: the one replay of the simulator's clock)

STEM = "figure4_fashion_mnist"
LABELS = {"teleportation": "Teleportation (k=8, ring)", "dsgd-ring": "DSGD, ring 0-1-...-24-0",
          "dsgd-base2": "DSGD, Base-2 Graph"}
COLORS = {"teleportation": "tab:red", "dsgd-ring": "tab:blue", "dsgd-base2": "tab:green"}
TAUS = (5.0, 0.0)
REFERENCE = bench_figure4.REFERENCE  # the clock every training run recorded


def measure_compute_us(data_dir=None, repeats: int = 5, calls: int = 100) -> float:
    """One LeNet gradient step (batch 32, one node) on this machine
    (``bench_figure4.step_time_us``)."""
    from mpi_teleport.measure import network

    problem = network.fashion_mnist(nodes=25, seed=0, data_dir=data_dir, alpha=10.0,
                                    val_fraction=0.0, sampling="epochs")
    return bench_figure4.step_time_us(problem, repeats, calls)


def load(d: Path) -> dict:
    cfg = json.loads((d / "config.json").read_text())
    rounds, acc, clock = [], [], []
    for line in (d / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            rounds.append(int(rec["round"]))
            acc.append(float(rec["accuracy"]))
            clock.append(float(rec["virtual_time_s"]))
    return {"cfg": cfg, "rounds": rounds, "accuracy": np.array(acc), "recorded": np.array(clock)}


def first_time(times: np.ndarray, acc: np.ndarray, level: float):
    hit = np.flatnonzero(acc >= level)
    return float(times[hit[0]]) if len(hit) else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--figure3", default=None, help="the Figure 3 results (default "
                   "RESULTS/figure3_fashion_mnist.json; its runs_dir holds the runs)")
    p.add_argument("--stem", default=STEM, help=f"output name (default {STEM})")
    p.add_argument("--compute-us", type=float, default=None, help="compute time per local "
                   "step, us (default: measured here)")
    p.add_argument("--sweep-us", type=float, nargs="*", default=[20.0, 200.0, 1000.0],
                   help="further compute times per step for the first-to-level table "
                   "(GPU-like steps; default 20 200 1000)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--levels", type=float, nargs="+", default=[0.70, 0.80, 0.85])
    args = p.parse_args(argv)
    results = Path(args.results)
    fig3_path = Path(args.figure3) if args.figure3 else results / "figure3_fashion_mnist.json"
    fig3 = json.loads(fig3_path.read_text())
    runs_dir = fig3_path.parent / fig3["runs_dir"]
    compute_us = args.compute_us if args.compute_us is not None else measure_compute_us(args.data_dir)
    print(f"compute time per local step: {compute_us:g} us", flush=True)

    computes = [compute_us] + [c for c in args.sweep_us if c != compute_us]
    curves, rows, worst = {}, [], 0.0
    for run in fig3["runs"]:
        d = runs_dir / "final" / f"alpha{run['alpha']:g}" / run["method"] / f"lr{run['lr']:g}" / f"seed{run['seed']}"
        r = load(d)
        ref = np.array(bench_figure4.virtual_times(r["cfg"], r["rounds"], REFERENCE["tau_us"],
                                                   REFERENCE["compute_us"]))
        worst = max(worst, float(np.max(np.abs(ref - r["recorded"]))))
        for tau in TAUS:
            for c in computes:
                times = np.array(bench_figure4.virtual_times(r["cfg"], r["rounds"], tau, c))
                curves.setdefault((run["alpha"], tau, c, run["method"]), []).append(
                    (times, r["accuracy"], run["lr"]))
    summary, sweep = {}, []
    for (alpha, tau, c, method), seeds in sorted(curves.items()):
        n = min(len(a) for _, a, _ in seeds)
        times = np.mean([t[:n] for t, _, _ in seeds], axis=0)
        acc = np.mean([a[:n] for _, a, _ in seeds], axis=0)
        time_to = {f"{lv:g}": first_time(times, acc, lv) for lv in args.levels}
        sweep.append({"alpha": alpha, "tau_us": tau, "compute_us": c, "method": method,
                      "end_time_s": float(times[-1]), "time_to": time_to})
        if c != compute_us:
            continue
        entry = {"alpha": alpha, "tau_us": tau, "method": method, "lr": seeds[0][2],
                 "seeds": len(seeds), "end_time_s": float(times[-1]),
                 "final_accuracy": float(acc[-1]), "time_to": time_to,
                 "curve": {"time_s": times.round(6).tolist(), "accuracy": acc.round(6).tolist()}}
        summary.setdefault(f"alpha={alpha:g} tau={tau:g}", []).append(entry)
        for t, a in zip(times, acc):
            rows.append([f"{alpha:g}", f"{tau:g}", method, f"{seeds[0][2]:g}", f"{t:.6f}", f"{a:.6f}"])
    first = {}
    for e in sweep:
        for lv in args.levels:
            key = f"alpha={e['alpha']:g} tau={e['tau_us']:g} compute_us={e['compute_us']:g} level={lv:g}"
            t = e["time_to"][f"{lv:g}"]
            if t is not None and (key not in first or t < first[key][0]):
                first[key] = (t, e["method"])
    first = {key: method for key, (_, method) in sorted(first.items())}
    out = {"figure": "Figure 4 (paper Sec. 5.3) on the real Fashion-MNIST, from the Figure 3 runs",
           "n": fig3["n"], "epochs": fig3["epochs"], "data_md5": fig3["data_md5"],
           "compute_us_per_step": compute_us, "taus_us": list(TAUS), "levels": args.levels,
           "replay_check": {"reference": REFERENCE, "max_abs_difference_s": worst,
                            "ok": worst <= 1e-9},
           "first_to_level": first, "compute_sweep": sweep, "panels": summary}
    (results / f"{args.stem}.json").write_text(json.dumps(out, indent=1) + "\n")
    with open(results / f"{args.stem}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["alpha", "tau_us", "method", "lr", "virtual_time_s", "mean_accuracy"])
        w.writerows(rows)
    plot(out, results / f"{args.stem}.png")
    print(f"replay reproduces the recorded clocks: {out['replay_check']}")
    for panel, entries in summary.items():
        for e in entries:
            times = ", ".join(f"{lv}: {'-' if t is None else f'{t:.2f} s'}" for lv, t in e["time_to"].items())
            print(f"{panel} {LABELS[e['method']]:28s} ends {e['end_time_s']:.2f} s at "
                  f"{100 * e['final_accuracy']:.2f} %; time to {times}")
    return 0


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alphas = sorted({e["alpha"] for es in out["panels"].values() for e in es}, reverse=True)
    fig, axes = plt.subplots(len(TAUS), len(alphas), figsize=(6.2 * len(alphas), 4.2 * len(TAUS)),
                             squeeze=False)
    for i, tau in enumerate(TAUS):
        for j, alpha in enumerate(alphas):
            ax = axes[i][j]
            for e in out["panels"].get(f"alpha={alpha:g} tau={tau:g}", []):
                c = e["curve"]
                ax.plot(c["time_s"], 100 * np.array(c["accuracy"]), color=COLORS[e["method"]],
                        label=f"{LABELS[e['method']]}, lr {e['lr']:g}")
            ax.set_title(f"alpha = {alpha:g}, tau = {tau:g} us")
            ax.set_xlabel("virtual time (s)")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Fashion-MNIST, LeNet-5, n = {out['n']}, {out['epochs']:g} epochs for every "
                 f"method\ndelay tau * mod(|i-j|, 24) us; {out['compute_us_per_step']:g} us per "
                 "local step (measured); mean over seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
