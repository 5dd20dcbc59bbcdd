"""Test accuracy against epochs from the metrics.jsonl of several runs (the paper's Fig. 3).

    python benchmarks/plot_accuracy.py RUN [RUN ...] --out fig.png [--csv curves.csv]
                                       [--select-lr {best,all}] [--title TEXT]

RUN is a run directory (the ``--out`` of ``mpi_teleport.sim`` / ``mpi_teleport.run``; a
``compare`` directory holds one run per algorithm), any directory above runs (searched
recursively for ``metrics.jsonl``), or a ``metrics.jsonl`` file. Each run needs its
``config.json`` beside ``metrics.jsonl``: nodes, k, batch_size, algorithm, topology,
problem, alpha, lr, seed and n_train (network problems write them).

* **Epoch** of a logged round r: ``r * batch_size * k_active / n_train`` with
  k_active = k for Teleportation and n for Decentralized SGD (config.json's ``k``
  already is n for dsgd): the number of training samples drawn so far, in passes over
  the training set. ``--epochs E`` runs stop all methods at the same E.
* **Panels**: one per (problem, alpha); rows alpha descending (10 above 0.1, as in the
  paper), columns problems.
* **Curves**: one per method = (algorithm, topology, k for Teleportation). The seeds of
  a method (same everything but the seed) are averaged: the mean accuracy is the line,
  the min..max over seeds the shaded band. Seeds logged at different rounds are
  linearly interpolated onto the epochs of the first seed, within the range all cover.
* **Step size**: with several ``lr`` for a method, ``--select-lr best`` (default) keeps
  the one with the highest mean final accuracy over its seeds -- the paper's grid search
  -- and names it in the legend; ``--select-lr all`` draws every lr.

``--csv`` writes the plotted curves (panel, method, lr, epoch, mean, min, max, seeds).
Records without ``accuracy`` (e.g. ``--k auto``'s phase-2 rows) are ignored.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

TOPOLOGY_NAMES = {"ring": "ring", "base2": "Base-2", "exp": "exp.", "onepeer-exp": "1-peer exp.",
                  "torus": "torus", "complete": "complete"}
PROBLEM_NAMES = {"fashion-mnist": "Fashion-MNIST (LeNet)", "cifar10": "CIFAR-10 (VGG)",
                 "digits": "digits (small CNN)", "quadratic": "quadratic"}


class RunError(ValueError):
    pass


def find_runs(paths) -> list[Path]:
    """metrics.jsonl files under the given paths (files or directories), sorted, unique."""
    found = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found += sorted(q for q in p.rglob("metrics.jsonl") if "checkpoints" not in q.parts)
        else:
            raise RunError(f"{p}: no such file or directory")
    seen, out = set(), []
    for f in found:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def load_run(metrics: Path) -> dict:
    cfg_path = metrics.with_name("config.json")
    if not cfg_path.is_file():
        raise RunError(f"{metrics}: no config.json beside it")
    cfg = json.loads(cfg_path.read_text())
    for key in ("nodes", "k", "batch_size", "algorithm"):
        if cfg.get(key) is None:
            raise RunError(f"{cfg_path}: lacks {key!r}")
    if cfg.get("n_train") is None:
        raise RunError(f"{cfg_path}: lacks 'n_train' (not a network-problem run?)")
    k = cfg["k"]
    if k == "auto":  # Algorithm 2: phase 1 runs k = n; the chosen k is in summary.json
        k = cfg["nodes"]
    active = cfg["nodes"] if cfg["algorithm"] == "dsgd" else int(k)
    rounds, acc = [], []
    with open(metrics) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            a = rec.get("accuracy")
            if a is None or not isinstance(a, (int, float)) or not math.isfinite(a):
                continue
            rounds.append(rec["round"])
            acc.append(float(a))
    if not rounds:
        raise RunError(f"{metrics}: no accuracy records")
    order = np.argsort(rounds, kind="stable")
    rounds = np.asarray(rounds, dtype=float)[order]
    epochs = rounds * cfg["batch_size"] * active / cfg["n_train"]
    return {"path": metrics, "cfg": cfg, "k_active": active, "epoch": epochs,
            "accuracy": np.asarray(acc)[order]}


def method_label(cfg: dict, k_active: int) -> str:
    topo = TOPOLOGY_NAMES.get(cfg.get("topology"), cfg.get("topology"))
    if cfg["algorithm"] == "dsgd":
        return f"Decentralized SGD ({topo})"
    k = "auto" if cfg.get("k") == "auto" else k_active
    return f"Teleportation (k={k}, {topo})"


def aggregate(runs: list[dict]) -> dict:
    """Mean/min/max over seeds on the epochs of the first seed (interpolated)."""
    runs = sorted(runs, key=lambda r: r["cfg"].get("seed", 0))
    lo = max(r["epoch"][0] for r in runs)
    hi = min(r["epoch"][-1] for r in runs)
    grid = runs[0]["epoch"]
    grid = grid[(grid >= lo - 1e-12) & (grid <= hi + 1e-12)]
    if len(grid) == 0:
        grid = np.array([hi])
    ys = np.vstack([np.interp(grid, r["epoch"], r["accuracy"]) for r in runs])
    return {"epoch": grid, "mean": ys.mean(axis=0), "min": ys.min(axis=0), "max": ys.max(axis=0),
            "seeds": [r["cfg"].get("seed") for r in runs], "final_mean": float(ys[:, -1].mean())}


def alpha_of(cfg: dict):
    """A run's Dirichlet alpha: config.json's ``alpha``; for a ``--problem module:function``
    factory (the authors' recipe), the alpha it received, else the command line's default
    0.1 (a flag equal to its default is not passed on to a factory)."""
    if cfg.get("alpha") is not None:
        return cfg["alpha"]
    if "factory_args" in cfg:
        return cfg["factory_args"].get("alpha", 0.1)
    return None


def build_curves(runs: list[dict], select_lr: str = "best") -> dict:
    """{panel: {method: [(lr, aggregate), ...]}}, panel = (problem, alpha)."""
    groups = defaultdict(list)
    for r in runs:
        c = r["cfg"]
        panel = (c.get("problem"), alpha_of(c))
        method = method_label(c, r["k_active"])
        groups[(panel, method, c.get("lr"))].append(r)
    by_method = defaultdict(list)
    for (panel, method, lr), members in groups.items():
        seeds = [m["cfg"].get("seed") for m in members]
        if len(set(seeds)) != len(seeds):
            dup = sorted({s for s in seeds if seeds.count(s) > 1})
            paths = ", ".join(str(m["path"]) for m in members if m["cfg"].get("seed") in dup)
            raise RunError(f"{method}, lr={lr}, {panel}: seed(s) {dup} appear more than once "
                           f"({paths}); pass each run once")
        by_method[(panel, method)].append((lr, aggregate(members)))
    curves = defaultdict(dict)
    for (panel, method), options in by_method.items():
        options.sort(key=lambda o: (o[0] is None, o[0]))
        if select_lr == "best":
            options = [max(options, key=lambda o: o[1]["final_mean"])]
        curves[panel][method] = options
    return curves


def _method_order(name: str) -> tuple:
    return (0 if name.startswith("Teleportation") else 1, name)


def plot(curves: dict, path: Path, title: str | None = None, multi_lr: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = sorted({p for p, _ in curves}, key=lambda p: list(PROBLEM_NAMES).index(p)
                      if p in PROBLEM_NAMES else 99)
    alphas = sorted({a for _, a in curves}, key=lambda a: -(a if a is not None else 0))
    fig, axes = plt.subplots(len(alphas), len(problems), squeeze=False,
                             figsize=(4.6 * len(problems), 3.4 * len(alphas)))
    colours = {}
    palette = ["#C44E52", "#4C72B0", "#55A868", "#8172B2", "#CCB974", "#64B5CD", "#DD8452"]
    if multi_lr:
        palette = [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab20").colors]
    for i, alpha in enumerate(alphas):
        for j, problem in enumerate(problems):
            ax = axes[i][j]
            panel = curves.get((problem, alpha))
            if not panel:
                ax.set_visible(False)
                continue
            for method in sorted(panel, key=_method_order):
                for lr, agg in panel[method]:
                    key = (method, lr) if multi_lr else method
                    colour = colours.setdefault(key, palette[len(colours) % len(palette)])
                    seeds = len(agg["seeds"])
                    label = f"{method}, lr={lr:g}" if lr is not None else method
                    if seeds > 1:
                        label += f" ({seeds} seeds)"
                    style = "-" if method.startswith("Teleportation") else "--"
                    ax.plot(agg["epoch"], 100 * agg["mean"], color=colour, lw=1.4, ls=style,
                            label=label)
                    if seeds > 1:
                        ax.fill_between(agg["epoch"], 100 * agg["min"], 100 * agg["max"],
                                        color=colour, alpha=0.2, lw=0)
            name = PROBLEM_NAMES.get(problem, problem)
            ax.set_title(f"{name}, alpha = {alpha:g}", fontsize=9)
            ax.set_xlabel("epoch")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
    if title:
        import textwrap

        fig.suptitle(textwrap.fill(title, width=max(40, 50 * len(problems))), fontsize=9)
    fig.tight_layout()  # makes room for the suptitle too
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write_csv(curves: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["problem", "alpha", "method", "lr", "epoch", "accuracy_mean", "accuracy_min",
                    "accuracy_max", "seeds"])
        for (problem, alpha), panel in sorted(curves.items(), key=lambda kv: str(kv[0])):
            for method in sorted(panel, key=_method_order):
                for lr, agg in panel[method]:
                    seeds = " ".join(str(s) for s in agg["seeds"])
                    for e, m, lo, hi in zip(agg["epoch"], agg["mean"], agg["min"], agg["max"]):
                        w.writerow([problem, alpha, method, lr, f"{e:.6g}", f"{m:.6g}",
                                    f"{lo:.6g}", f"{hi:.6g}", seeds])


def summary_lines(curves: dict) -> list[str]:
    lines = []
    for (problem, alpha), panel in sorted(curves.items(), key=lambda kv: str(kv[0])):
        for method in sorted(panel, key=_method_order):
            for lr, agg in panel[method]:
                lines.append(f"{problem} alpha={alpha:g} {method} lr={lr}: final accuracy "
                             f"{100 * agg['mean'][-1]:.2f}% (min {100 * agg['min'][-1]:.2f}, "
                             f"max {100 * agg['max'][-1]:.2f}; seeds {agg['seeds']}; "
                             f"{agg['epoch'][-1]:.3g} epochs)")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="See the module docstring for the epoch and seed semantics.")
    p.add_argument("runs", nargs="+", help="run directories, directories above runs, or metrics.jsonl files")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--csv", default=None, help="also write the plotted curves as CSV")
    p.add_argument("--select-lr", choices=("best", "all"), default="best")
    p.add_argument("--title", default=None)
    args = p.parse_args(argv)
    try:
        files = find_runs(args.runs)
        if not files:
            raise RunError(f"no metrics.jsonl under {' '.join(args.runs)}")
        runs = [load_run(f) for f in files]
        curves = build_curves(runs, args.select_lr)
    except (RunError, json.JSONDecodeError, KeyError) as exc:
        print(f"plot_accuracy: error: {exc}", file=sys.stderr)
        return 2
    plot(curves, Path(args.out), args.title, multi_lr=args.select_lr == "all")
    if args.csv:
        write_csv(curves, Path(args.csv))
    for line in summary_lines(curves):
        print(line)
    print(f"plot_accuracy: {len(runs)} runs -> {args.out}" + (f", {args.csv}" if args.csv else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
