"""Simulator throughput (rounds/s) against a bare numpy loop doing the same math.

    python benchmarks/bench_sim.py [--quick] [--out benchmarks/results]

Cases (d = 50, ring, sigma2 = zeta2 = 10, so gradient noise and b_i are generated):
Decentralized SGD with n in {100, 1000, 10^4} and Teleportation with k = 64 tokens and
n in {100, 10^4, 10^6}. The step size is 0.5 / n (the largest curvature is a_n^2 = n, so
every run stays finite).

The reference is the loop one would write by hand in numpy: the same schedule call
(``schedule.holders``), the same keyed noise (``rng.normals`` with the keys of
``Quadratic``), b_i kept in a table when n*d is small (the simulator's own policy) and
generated for the holders otherwise, and ring mixing as slice arithmetic (rows summed in
ascending source order, so the numbers are the simulator's bit for bit). Its final token
matrix is compared with the simulator's (captured at the last logging round); the
comparison is only reported as honest when they are identical.

Timing: each repeat runs the simulator and the reference back to back (interleaved, so
background load hits both alike); a case's rounds/s comes from the fastest repeat of
each (the median is kept in the JSON too). Simulator time is ``simulate()``'s own wall
time minus the time spent in its two logging calls (round 0 and the last round; for
n = 10^6 the first one computes x* over all nodes, seconds of work that is not part of a
round). That first logging call also fills the simulator's b_i table (via x*), so the
reference builds its table before its clock starts too: neither pays it in the timing. Target: simulator time <= 1.5 x reference time per case.

Writes bench_sim.csv, bench_sim.json and bench_sim.png into --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mpi_teleport.measure import metrics
from mpi_teleport.measure import rng, schedule
from mpi_teleport.measure import sim  # noqa: E402
from mpi_teleport.measure import Values  # noqa: E402
from mpi_teleport.measure import Recorder  # noqa: E402
from mpi_teleport.measure import RunFiles  # noqa: E402

TARGET = 1.5
D = 50
SIGMA2 = ZETA2 = 10.0
SEED = 0
B_TABLE_LIMIT = 4_000_000  # the simulator's policy (problems/quadratic.py _CACHE_LIMIT)

# (algorithm, n, k, rounds in full mode); rounds chosen for ~0.3-1.5 s per timed run.
CASES = [
    ("dsgd", 100, 100, 2000),
    ("dsgd", 1000, 1000, 300),
    ("dsgd", 10_000, 10_000, 40),
    ("teleportation", 100, 64, 3000),
    ("teleportation", 10_000, 64, 3000),
    ("teleportation", 1_000_000, 64, 3000),
]


class CapturingRecorder(Recorder):
    """The simulator's Recorder, also keeping the last logged token matrix and the
    time spent logging (excluded from the round timing): the engine brackets a logging
    round, evaluation included, with pause/resume."""

    last_x: np.ndarray | None = None
    log_seconds = 0.0

    def resume(self, since):
        CapturingRecorder.log_seconds += time.perf_counter() - since
        super().resume(since)

    def log(self, r, x, time_s, extra=None, metrics=None):
        CapturingRecorder.last_x = np.array(x, copy=True)
        return super().log(r, x, time_s, extra, metrics)


def run_simulator(cfg: Values, algorithm: str, k: int) -> tuple[float, np.ndarray]:
    """Seconds spent in rounds (logging excluded) and the final token matrix."""
    CapturingRecorder.last_x = None
    CapturingRecorder.log_seconds = 0.0
    saved = metrics.Recorder  # runner.train looks the recorder class up in metrics at each run
    metrics.Recorder = CapturingRecorder
    try:
        summary = sim.simulate(cfg, algorithm, k, RunFiles(None))
    finally:
        metrics.Recorder = saved
    return summary["wall_time_s"] - CapturingRecorder.log_seconds, CapturingRecorder.last_x


def ring_mix(y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """x_j = w*y_{j-1} + w*y_j + w*y_{j+1}, w = 1/3, each row summed in ascending source
    index (rows 0 and k-1 wrap around, so their sources sort differently). k >= 3."""
    w = 1.0 / 3.0
    inner = out[1:-1]
    np.multiply(y[:-2], w, out=inner)
    inner += w * y[1:-1]
    inner += w * y[2:]
    out[0] = w * y[0] + w * y[1] + w * y[-1]
    out[-1] = w * y[0] + w * y[-2] + w * y[-1]
    return out


def run_reference(algorithm: str, n: int, k: int, rounds: int, lr: float) -> tuple[float, np.ndarray]:
    """The same run as a bare numpy loop; returns (seconds, final token matrix)."""
    d, seed = D, SEED
    noise_scale = math.sqrt(SIGMA2 / d)
    b_scale = math.sqrt(ZETA2)
    key_b = rng.key(seed, rng.STREAM_PROBLEM)
    x = np.tile(rng.normals(rng.key(seed, rng.STREAM_INIT), [0], d)[0], (k, 1))
    spare = np.empty_like(x)
    table = None
    if n * d <= B_TABLE_LIMIT:
        every = np.arange(n, dtype=np.int64)
        table = (b_scale / (every + 1.0))[:, None] * rng.normals(key_b, every, d)
    start = time.perf_counter()
    if algorithm == "dsgd":
        nodes = np.arange(n, dtype=np.int64)
        i = nodes + 1.0
        curvature = (i * i / n)[:, None]
        b = table
    for t in range(rounds):
        if algorithm != "dsgd":
            nodes = schedule.holders(seed, n, k, t)
            b = table[nodes] if table is not None else \
                (b_scale / (nodes + 1.0))[:, None] * rng.normals(key_b, nodes, d)
            i = nodes + 1.0
            curvature = (i * i / n)[:, None]
        g = x - b
        g *= curvature
        noise = rng.normals(rng.key(seed, rng.STREAM_NOISE, t), nodes, d)
        noise *= noise_scale
        g += noise
        g *= lr
        y = np.subtract(x, g, out=g)
        x, spare = ring_mix(y, spare), x
    return time.perf_counter() - start, x


def bench_case(algorithm: str, n: int, k: int, rounds: int, repeats: int) -> dict:
    lr = 0.5 / n
    cfg = Values.of_job(dict(nodes=n, algorithm=algorithm, k=k, rounds=rounds, lr=lr,
                             sigma2=SIGMA2, zeta2=ZETA2, dim=D, topology="ring",
                             log_every=rounds, seed=SEED, progress="off"))
    sim_times, ref_times = [], []
    max_diff, identical = 0.0, True
    for _ in range(repeats):
        ts, xs = run_simulator(cfg, algorithm, k)
        tr, xr = run_reference(algorithm, n, k, rounds, lr)
        sim_times.append(ts)
        ref_times.append(tr)
        if xs is None or xs.shape != xr.shape:
            identical, max_diff = False, math.inf
        else:
            identical = identical and bool(np.array_equal(xs, xr))
            max_diff = max(max_diff, float(np.max(np.abs(xs - xr))))
    best_sim, best_ref = min(sim_times), min(ref_times)
    ratio = best_sim / best_ref
    return {
        "algorithm": algorithm, "n": n, "k": k, "d": D, "rounds": rounds, "repeats": repeats,
        "lr": lr,
        "sim_rounds_per_s": rounds / best_sim,
        "ref_rounds_per_s": rounds / best_ref,
        "ratio": ratio,
        "sim_rounds_per_s_median": rounds / statistics.median(sim_times),
        "ref_rounds_per_s_median": rounds / statistics.median(ref_times),
        "ratio_median": statistics.median(sim_times) / statistics.median(ref_times),
        "identical": identical,
        "max_abs_diff": max_diff,
        "target": TARGET,
        "pass": ratio <= TARGET,
        "sim_seconds": sim_times,
        "ref_seconds": ref_times,
    }


def label(row: dict) -> str:
    n = row["n"]
    ntext = f"1e{int(round(math.log10(n)))}" if n >= 10_000 else str(n)
    return f"DSGD n={ntext}" if row["algorithm"] == "dsgd" else f"Tele k={row['k']} n={ntext}"


def plot(rows: list[dict], path: Path, quick: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    pos = np.arange(len(rows))
    width = 0.38
    ax.bar(pos - width / 2, [r["sim_rounds_per_s"] for r in rows], width, label="simulator")
    ax.bar(pos + width / 2, [r["ref_rounds_per_s"] for r in rows], width, label="bare numpy reference")
    for p, r in zip(pos, rows):
        top = max(r["sim_rounds_per_s"], r["ref_rounds_per_s"])
        mark = "" if r["identical"] else " (!=)"
        ax.text(p, top * 1.15, f"{r['ratio']:.2f}x{mark}", ha="center", fontsize=9,
                color="tab:green" if r["pass"] else "tab:red")
    ax.set_yscale("log")
    ax.set_xticks(pos, [label(r) for r in rows], fontsize=8)
    ax.set_ylabel("rounds / s (higher is better)")
    ax.set_ylim(top=max(max(r["sim_rounds_per_s"], r["ref_rounds_per_s"]) for r in rows) * 3)
    ax.set_title(f"Simulator throughput, d={D}, ring; label = simulator time / reference time "
                 f"(target <= {TARGET}){' [quick]' if quick else ''}", fontsize=9)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few rounds and repeats (CI-sized)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                        help="output directory (default benchmarks/results)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case (default 5, quick 2)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    rows = []
    print(f"{'case':<22}{'rounds':>7}{'sim r/s':>11}{'ref r/s':>11}{'ratio':>7}  same  verdict")
    for algorithm, n, k, rounds in CASES:
        if args.quick:
            rounds = max(5, rounds // 20)
        row = bench_case(algorithm, n, k, rounds, repeats)
        rows.append(row)
        same = "yes" if row["identical"] else f"NO (max diff {row['max_abs_diff']:.3g})"
        print(f"{label(row):<22}{rounds:>7}{row['sim_rounds_per_s']:>11.1f}"
              f"{row['ref_rounds_per_s']:>11.1f}{row['ratio']:>7.2f}  {same:<4}  "
              f"{'PASS' if row['pass'] else 'FAIL'} (target <= {TARGET})", flush=True)

    fields = ["algorithm", "n", "k", "d", "rounds", "repeats", "sim_rounds_per_s",
              "ref_rounds_per_s", "ratio", "ratio_median", "identical", "max_abs_diff", "pass"]
    with open(out / "bench_sim.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    meta = {
        "benchmark": "bench_sim", "quick": args.quick, "target_ratio": TARGET,
        "ratio": "simulator seconds / reference seconds (fastest repeat of each)",
        "d": D, "sigma2": SIGMA2, "zeta2": ZETA2, "topology": "ring", "seed": SEED,
        "python": platform.python_version(), "numpy": np.__version__,
        "machine": platform.machine(), "cpus": __import__("os").cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    with open(out / "bench_sim.json", "w") as f:
        json.dump({"meta": meta, "cases": rows}, f, indent=2)
    plot(rows, out / "bench_sim.png", args.quick)
    misses = [label(r) for r in rows if not r["pass"]]
    wrong = [label(r) for r in rows if not r["identical"]]
    print(f"wrote {out / 'bench_sim.csv'}, .json, .png")
    print("all cases within target" if not misses else f"target missed: {', '.join(misses)}")
    if wrong:
        print(f"WARNING: reference differs from simulator: {', '.join(wrong)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
