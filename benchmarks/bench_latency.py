"""Heterogeneous-network latency sweep (paper Sec. 5.3) with the injectable latency layer.

    python benchmarks/bench_latency.py [--quick] [--out benchmarks/results]
    MPI_LAUNCHER="srun --mpi=pmix" python benchmarks/bench_latency.py   # on a cluster

Part 1, virtual clock (meaningful on any host, here 25 ranks on 2 cores): the synthetic
problem (Sec. 5.1, n = 25, d = 50, sigma2 = zeta2 = 10) under ``--latency mod:TAU``
(delta(i, j) = TAU * (|i - j| mod 24) us) for TAU in {0, 1, 2, 5, 10, 20}, for

* Teleportation, Algorithm 3 (overlap, one phase) and Algorithm 1 (simple, two phases),
  k = 8 tokens, ring over the tokens;
* Decentralized SGD on the ring over nodes in natural order 0-1-...-24-0 -- the paper's
  latency-optimal ring (node i -> 1 + mod(i, 25) in 1-based ids): every link costs TAU
  and the wrap-around link 24-0 costs TAU * (24 mod 24) = 0, so a round costs TAU;
* Decentralized SGD on the Base-2 Graph (links of all lengths, up to 23 TAU).

Every run is a real MPI run (``python -m mpi_teleport.run --clock virtual``) with a
modelled compute time per local step (``--compute-time``, default: this machine's
measured median time of one gradient call), so the virtual times are deterministic; each
is cross-checked against the simulator's oracle (must be equal bit for bit). Step sizes
are tuned once per method by the simulator on a small grid (latency never changes the
numbers, so one tuning serves every TAU): fewest rounds to the error target.
Reported: virtual time per round, virtual time to the target, error vs virtual time.

Part 2, real clock (only with ranks <= cores, i.e. 2 ranks here): the probe
(``python -m mpi_teleport.latency probe``) -- node 0 exchanging with node 1 over 1 ms out /
3 ms back (2 ranks), and with nodes 1 and 2 over 1 ms and 3 ms links (3 ranks, marked
oversubscribed when cores < 3): the exchange completes after ~3 ms, not 4; and DSGD on 2
ranks under ``const:US`` with the real clock, real time per round against the injected
delay and against the virtual clock (measured compute).

Writes bench_latency{,_quick}.csv (one row per run), .json (settings and key numbers),
.png (time vs TAU, Alg. 3 vs Alg. 1, real clock) and _curves.png (error vs virtual
wall-clock per TAU) into --out. ``--quick``: 8 ranks, 60 rounds, TAU in {0, 5}.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mpi_teleport.measure import cli  # noqa: E402
from mpi_teleport.measure import resolve  # noqa: E402
from mpi_teleport.measure import mpi_env, mpirun_command  # noqa: E402
from mpi_teleport.measure import RunFiles, read_jsonl, write_json  # noqa: E402
from mpi_teleport.measure import make_problem  # noqa: E402
from mpi_teleport.measure import sim, simulate  # noqa: E402

METHODS = [  # key, label, flags
    ("tele-alg3", "Teleportation Alg. 3 (overlap), k=8",
     ["--algorithm", "teleportation", "--variant", "overlap", "--k", "8", "--topology", "ring"]),
    ("tele-alg1", "Teleportation Alg. 1 (simple), k=8",
     ["--algorithm", "teleportation", "--variant", "simple", "--k", "8", "--topology", "ring"]),
    ("dsgd-ring", "DSGD, ring 0-1-...-24-0", ["--algorithm", "dsgd", "--topology", "ring"]),
    ("dsgd-base2", "DSGD, Base-2 Graph", ["--algorithm", "dsgd", "--topology", "base2"]),
]
LR_GRID = (0.002, 0.0015, 0.001, 0.0007, 0.0005)
TAUS = (0, 1, 2, 5, 10, 20)
REAL_DELAYS_US = (0, 20, 100, 500, 1000, 2000)
TARGET = 1e-3
SEED = 0


def launch(n: int, args: list[str], launcher: str, timeout: float) -> subprocess.CompletedProcess:
    """``python <args>`` on n ranks: mpirun (auto, oversubscribing as needed) or a given
    launcher prefix such as 'srun --mpi=pmix'."""
    py = [sys.executable, *args]
    cmd = mpirun_command(n, py) if launcher == "auto" else [*shlex.split(launcher), "-n", str(n), *py]
    env = mpi_env()
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("PMIX_MCA_psec", "native")
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")  # busy-polling ranks share a loaded host better
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def measure_compute_us(repeats: int = 5, calls: int = 1000) -> float:
    """Time of one local gradient (d = 50): the 25th percentile of the per-call times, the
    smallest over a few repeats (background load only ever adds time)."""
    problem = make_problem(cli.problem_of(resolve({"nodes": 25})))
    x, out = np.zeros((1, 50)), np.zeros((1, 50))
    medians = []
    for _ in range(repeats):
        times = []
        for t in range(calls):
            start = time.perf_counter()
            problem.gradient([t % 25], x, t, out=out)
            times.append(time.perf_counter() - start)
        medians.append(float(np.percentile(times, 25)))
    return round(min(medians) * 1e6, 1)


def tune(n: int, rounds: int, log_every: int, grid) -> dict:
    """Per method, the step size with the fewest rounds to the target (simulator)."""
    best = {}
    for key, _, flags in METHODS:
        opts = dict(zip(flags[::2], flags[1::2]))
        scores = []
        for lr in grid:
            raw = {"nodes": n, "algorithm": opts["--algorithm"], "topology": opts["--topology"],
                   "lr": lr, "rounds": rounds, "log_every": log_every, "target": TARGET,
                   "seed": SEED}
            if "--k" in opts:
                raw["k"] = min(int(opts["--k"]), n)
                raw["variant"] = opts["--variant"]
            cfg = resolve(raw)
            s = simulate(cfg, cfg.algorithm, cfg.k if cfg.algorithm != "dsgd" else n, RunFiles(None))
            reached = s["rounds_to_target"]
            scores.append((reached if reached is not None else float("inf"), s["final_error"], lr))
        best[key] = min(scores)[2]
    return best


def first_reach(records, key="virtual_time_s"):
    for r in records:
        if r["error"] <= TARGET:
            return r["round"], r[key]
    return None, None


def virtual_sweep(args, lrs, compute_us, work: Path) -> list[dict]:
    rows = []
    for tau in args.taus:
        for key, label, flags in METHODS:
            flags = [str(min(int(f), args.ranks)) if i and flags[i - 1] == "--k" else f
                     for i, f in enumerate(flags)]
            common = [*flags, "--lr", str(lrs[key]), "--rounds", str(args.rounds),
                      "--log-every", str(args.log_every), "--seed", str(SEED),
                      "--target", str(TARGET), "--latency", f"mod:{tau:g}", "--clock", "virtual",
                      "--compute-time", str(compute_us), "--progress", "off"]
            out = work / f"{key}_tau{tau:g}"
            start = time.perf_counter()
            launch(args.ranks, ["-m", "mpi_teleport.run", *common, "--out", str(out / "mpi")],
                   args.launcher, args.timeout)
            elapsed = time.perf_counter() - start
            with contextlib.redirect_stdout(io.StringIO()):  # the oracle's table is not news
                assert sim.main(["--nodes", str(args.ranks), *common, "--out", str(out / "sim")]) == 0
            recs = read_jsonl(out / "mpi" / "metrics.jsonl")
            oracle = read_jsonl(out / "sim" / "metrics.jsonl")
            equal = ([r["virtual_time_s"] for r in recs] == [r["virtual_time_s"] for r in oracle]
                     and [r["error"] for r in recs] == [r["error"] for r in oracle])
            last = recs[-1]
            rounds_to, vt_to = first_reach(recs)
            rows.append({
                "part": "virtual", "method": key, "ranks": args.ranks,
                "label": label.replace("24", str(args.ranks - 1)),
                "tau_us": tau, "latency": f"mod:{tau:g}", "clock": "virtual",
                "compute_time_us": compute_us, "lr": lrs[key], "rounds": last["round"],
                "virtual_time_s": last["virtual_time_s"],
                "per_round_us": last["virtual_time_s"] / last["round"] * 1e6,
                "rounds_to_target": rounds_to, "virtual_time_to_target_s": vt_to,
                "final_error": last["error"], "real_time_s": last["time_s"],
                "real_per_round_us": last["time_s"] / last["round"] * 1e6,
                "oracle_equal": equal, "launch_wall_s": round(elapsed, 2),
                "curve": [(r["virtual_time_s"], r["error"]) for r in recs],
            })
            print(f"  tau={tau:>4g} {key:<11} {rows[-1]['per_round_us']:8.1f} us/round (virtual), "
                  f"target at {vt_to if vt_to is None else round(vt_to * 1e3, 3)} ms, "
                  f"oracle equal: {equal}", flush=True)
    return rows


def probe(args, n: int, matrix, work: Path) -> dict:
    path = work / f"probe{n}.csv"
    path.write_text("\n".join(",".join(str(v) for v in row) for row in matrix) + "\n")
    proc = launch(n, ["-m", "mpi_teleport.latency", "probe", "--latency", f"matrix:{path}",
                      "--reps", str(args.reps)], args.launcher, args.timeout)
    reps = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    reps = reps[2:] if len(reps) > 4 else reps  # the first repetitions warm up
    ex = [r["ranks"][0]["exchange_s"] * 1e3 for r in reps]
    visible = {}
    for r in reps:
        for row in r["ranks"]:
            for peer, s in row["visible_s"].items():
                visible.setdefault(f"{peer}->{row['rank']}", []).append(s * 1e3)
    return {
        "ranks": n, "oversubscribed": n > (os.cpu_count() or 1), "matrix_us": matrix,
        "reps": len(reps), "node0_exchange_ms_median": statistics.median(ex),
        "node0_exchange_ms_p10": float(np.percentile(ex, 10)),
        "node0_exchange_ms_p90": float(np.percentile(ex, 90)),
        "sum_of_links_ms": (sum(matrix[0][1:]) if n > 2 else matrix[0][1] + matrix[1][0]) / 1e3,
        "slowest_link_ms": max(max(matrix[0][1:]), max(row[0] for row in matrix[1:])) / 1e3,
        "visible_ms_min": {k: min(v) for k, v in visible.items()},
        "visible_ms_median": {k: statistics.median(v) for k, v in visible.items()},
        "exchange_ms": ex,
    }


def real_sweep(args, work: Path) -> list[dict]:
    """DSGD on 2 ranks under const:US, real and virtual clock: time per round = the run's
    last time_s (virtual_time_s) / rounds, logged only at the end; the fastest of a few
    repeats (background load only ever adds time), the median kept too."""
    rows = []
    for us in args.real_delays:
        got = {"real": [], "virtual": []}
        for rep in range(args.real_repeats):
            for clock in ("real", "virtual"):
                out = work / f"real2_{us}_{clock}_{rep}"
                launch(2, ["-m", "mpi_teleport.run", "--algorithm", "dsgd", "--latency",
                           f"const:{us:g}", "--clock", clock, "--rounds", str(args.real_rounds),
                           "--log-every", str(args.real_rounds), "--progress", "off",
                           "--out", str(out)], args.launcher, args.timeout)
                last = read_jsonl(out / "metrics.jsonl")[-1]
                got[clock].append((last["time_s"] / last["round"] * 1e6,
                                   last["virtual_time_s"] / last["round"] * 1e6))
        real_t = [t for t, _ in got["real"]]
        rows.append({
            "part": "real", "method": "dsgd-2ranks", "label": "DSGD on 2 ranks", "ranks": 2,
            "latency": f"const:{us:g}", "delay_us": us, "clock": "real", "rounds": args.real_rounds,
            "real_per_round_us": min(real_t), "real_per_round_us_median": statistics.median(real_t),
            "virtual_per_round_us_real_run": min(v for _, v in got["real"]),
            "virtual_per_round_us_virtual_run": min(v for _, v in got["virtual"]),
            "real_per_round_us_virtual_run": min(t for t, _ in got["virtual"]),
        })
        r = rows[-1]
        print(f"  const:{us:<5g} real clock {r['real_per_round_us']:8.1f} us/round (fastest of "
              f"{args.real_repeats}; median {r['real_per_round_us_median']:.1f}); virtual clock "
              f"{r['virtual_per_round_us_virtual_run']:8.1f} us/round, its real time "
              f"{r['real_per_round_us_virtual_run']:.1f} us/round", flush=True)
    return rows


def plot(args, rows, probes, real_rows, out: Path, stem: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    virt = [r for r in rows if r["part"] == "virtual"]
    labels = {k: lab.replace("24", str(args.ranks - 1)) for k, lab, _ in METHODS}
    styles = {"tele-alg3": "o-", "tele-alg1": "s--", "dsgd-ring": "^-", "dsgd-base2": "v-"}
    fig, ax = plt.subplots(2, 2, figsize=(12, 9))
    for key in labels:
        rs = sorted((r for r in virt if r["method"] == key), key=lambda r: r["tau_us"])
        taus = [r["tau_us"] for r in rs]
        ax[0, 0].plot(taus, [r["per_round_us"] for r in rs], styles[key], label=labels[key])
        reach = [(r["tau_us"], r["virtual_time_to_target_s"]) for r in rs
                 if r["virtual_time_to_target_s"] is not None]
        if reach:
            ax[0, 1].plot(*zip(*[(t, v * 1e3) for t, v in reach]), styles[key], label=labels[key])
        else:
            ax[0, 1].plot([], [], styles[key], label=labels[key] + f" (target not reached in "
                                                                  f"{args.rounds} rounds)")
    ax[0, 0].set(xlabel="TAU (us)", ylabel="virtual time per round (us)",
                 title=f"Per-round cost, mod:TAU, n={args.ranks}, compute {rows[0]['compute_time_us']} us/step")
    ax[0, 1].set(xlabel="TAU (us)", ylabel=f"virtual time to error {TARGET:g} (ms)",
                 title="Time to target")
    for a in ax[0]:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    # Alg. 3 vs Alg. 1 per round
    taus = sorted({r["tau_us"] for r in virt})
    a3 = {r["tau_us"]: r["per_round_us"] for r in virt if r["method"] == "tele-alg3"}
    a1 = {r["tau_us"]: r["per_round_us"] for r in virt if r["method"] == "tele-alg1"}
    xs = np.arange(len(taus))
    ax[1, 0].bar(xs - 0.2, [a3[t] for t in taus], 0.4, label="Alg. 3 (one phase)")
    ax[1, 0].bar(xs + 0.2, [a1[t] for t in taus], 0.4, label="Alg. 1 (two phases)")
    for x, t in zip(xs, taus):
        ax[1, 0].text(x, max(a3[t], a1[t]) * 1.02, f"x{a1[t] / a3[t]:.2f}", ha="center", fontsize=8)
    ax[1, 0].set_ylim(0, max(max(a3.values()), max(a1.values())) * 1.15)
    ax[1, 0].set_xticks(xs, [f"{t:g}" for t in taus])
    ax[1, 0].set(xlabel="TAU (us)", ylabel="virtual time per round (us)",
                 title="Teleportation: Alg. 3 vs Alg. 1 per round (virtual clock)")
    ax[1, 0].legend(fontsize=8)
    ax[1, 0].grid(alpha=0.3, axis="y")
    # real clock
    a = ax[1, 1]
    if real_rows:
        d = [r["delay_us"] for r in real_rows]
        a.plot(d, [r["real_per_round_us"] for r in real_rows], "o-",
               label="real clock: time_s per round")
        a.plot(d, [r["virtual_per_round_us_virtual_run"] for r in real_rows], "s--",
               label="virtual clock: virtual_time_s per round")
        a.plot(d, [r["real_per_round_us_virtual_run"] for r in real_rows], "x:",
               label="virtual clock run: its real time_s per round")
        a.plot(d, d, ":", color="gray", label="injected delay")
        a.set_xscale("symlog", linthresh=10)
        a.set_yscale("symlog", linthresh=10)
    text = "\n".join(
        f"probe, {p['ranks']} ranks{' (oversubscribed)' if p['oversubscribed'] else ''}: node 0 "
        f"over 1 ms + 3 ms links\n  exchange {p['node0_exchange_ms_median']:.2f} ms median, "
        f"{p['node0_exchange_ms_p10']:.2f} ms p10 (sum of links: {p['sum_of_links_ms']:.0f} ms)"
        for p in probes)
    if text:
        a.text(0.02, 0.98, text, transform=a.transAxes, va="top", fontsize=8,
               bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "0.8"})
    a.set(xlabel="injected delay (us)", ylabel="time per round (us)",
          title="Real clock (ranks <= cores): DSGD on 2 ranks, const:US")
    a.grid(alpha=0.3)
    a.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Latency layer on {platform.node()} ({os.cpu_count()} cores); "
                 f"{'quick' if args.quick else 'full'} run")
    fig.tight_layout()
    main_png = out / f"{stem}.png"
    fig.savefig(main_png, dpi=110)
    plt.close(fig)

    cols = min(3, len(taus))
    nrows = -(-len(taus) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), squeeze=False,
                             sharey=True)
    for a in axes.flat[len(taus):]:
        a.axis("off")
    for a, tau in zip(axes.flat, taus):
        for key in labels:
            r = next(r for r in virt if r["method"] == key and r["tau_us"] == tau)
            curve = np.array(r["curve"])
            a.plot(curve[:, 0] * 1e3, curve[:, 1], styles[key][:-1] + "-", markersize=2,
                   label=labels[key])
        a.axhline(TARGET, color="gray", lw=0.8, ls=":")
        a.set(xlabel="virtual wall-clock (ms)", title=f"TAU = {tau:g} us", yscale="log")
        a.grid(alpha=0.3)
    for a in axes[:, 0]:
        a.set_ylabel("error")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Error vs virtual wall-clock, mod:TAU, n={args.ranks}")
    fig.tight_layout()
    curves_png = out / f"{stem}_curves.png"
    fig.savefig(curves_png, dpi=110)
    plt.close(fig)
    return [str(main_png), str(curves_png)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CI-sized: 8 ranks, 60 rounds, TAU 0 and 5")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--launcher", default=os.environ.get("MPI_LAUNCHER", "auto"),
                        help="'auto' (mpirun from this venv, oversubscribing as needed) or a "
                             "prefix such as 'srun --mpi=pmix' or 'mpirun' (env MPI_LAUNCHER)")
    parser.add_argument("--ranks", type=int, help="nodes = ranks of the virtual sweep (25; quick 8)")
    parser.add_argument("--rounds", type=int, help="rounds per run (1000; quick 60)")
    parser.add_argument("--taus", type=float, nargs="+", help="TAU values in us")
    parser.add_argument("--compute-time", type=float, help="modelled compute us per step "
                        "(default: measured here)")
    parser.add_argument("--no-real", action="store_true", help="skip the real-clock part")
    parser.add_argument("--timeout", type=float, default=900, help="per launch, seconds")
    parser.add_argument("--replot", metavar="JSON", help="only redraw the PNGs from a result "
                        "JSON of an earlier run (e.g. benchmarks/results/bench_latency.json)")
    args = parser.parse_args(argv)
    if args.replot:
        data = json.loads(Path(args.replot).read_text())
        args.ranks, args.rounds, args.quick = data["ranks"], data["rounds"], data["quick"]
        print("wrote", ", ".join(plot(args, data["runs"], data["probes"], data["real_2ranks"],
                                      Path(args.replot).parent, Path(args.replot).stem)))
        return 0
    q = args.quick
    args.ranks = args.ranks or (8 if q else 25)
    args.rounds = args.rounds or (60 if q else 1000)
    args.taus = args.taus or ([0, 5] if q else list(TAUS))
    args.log_every = 5 if q else 10
    args.reps = 10 if q else 100
    args.real_rounds = 50 if q else 300
    args.real_repeats = 1 if q else 3
    args.real_delays = (0, 1000) if q else REAL_DELAYS_US
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "bench_latency_quick" if q else "bench_latency"

    compute_us = args.compute_time if args.compute_time is not None else measure_compute_us()
    print(f"compute time per local step: {compute_us} us", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_latency_") as tmp:
        work = Path(tmp)
        probes, real_rows = [], []
        cores = os.cpu_count() or 1
        load = {"before_real": os.getloadavg()}
        if not args.no_real and cores >= 2:  # first, before our own 25-rank runs load the host
            print("real clock (ranks <= cores):", flush=True)
            probes.append(probe(args, 2, [[0, 1000], [3000, 0]], work))
            probes.append(probe(args, 3, [[0, 1000, 3000], [1000, 0, 500], [3000, 500, 0]], work))
            for p in probes:
                print(f"  probe {p['ranks']} ranks: node 0 exchange {p['node0_exchange_ms_median']:.3f} ms "
                      f"median (p10 {p['node0_exchange_ms_p10']:.3f}, p90 {p['node0_exchange_ms_p90']:.3f});"
                      f" min visibility {p['visible_ms_min']}", flush=True)
            real_rows = real_sweep(args, work)
            load["after_real"] = os.getloadavg()
        lrs = tune(args.ranks, args.rounds, args.log_every, (0.001,) if q else LR_GRID)
        print(f"step sizes (simulator, fewest rounds to {TARGET:g}): {lrs}", flush=True)
        print(f"virtual clock, {args.ranks} ranks:", flush=True)
        rows = virtual_sweep(args, lrs, compute_us, work)

    fields = ["part", "method", "label", "ranks", "tau_us", "latency", "delay_us", "clock",
              "compute_time_us", "lr", "rounds", "virtual_time_s", "per_round_us",
              "rounds_to_target", "virtual_time_to_target_s", "final_error", "real_time_s",
              "real_per_round_us", "real_per_round_us_median", "virtual_per_round_us_real_run",
              "virtual_per_round_us_virtual_run", "real_per_round_us_virtual_run",
              "oracle_equal", "launch_wall_s"]
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows + real_rows:
            w.writerow(r)
        for p in probes:
            w.writerow({"part": "probe", "method": f"probe-{p['ranks']}ranks",
                        "label": "node 0 exchange over 1 ms and 3 ms links", "ranks": p["ranks"],
                        "clock": "real", "real_per_round_us": p["node0_exchange_ms_median"] * 1e3})
    pngs = plot(args, rows, probes, real_rows, out, stem)
    per_round = {r["method"]: {} for r in rows}
    for r in rows:
        per_round[r["method"]][r["tau_us"]] = round(r["per_round_us"], 3)
    t5 = 5 if 5 in args.taus else args.taus[-1]
    a3 = next(r for r in rows if r["method"] == "tele-alg3" and r["tau_us"] == t5)
    a1 = next(r for r in rows if r["method"] == "tele-alg1" and r["tau_us"] == t5)
    summary = {
        "host": platform.node(), "cores": os.cpu_count(), "loadavg_1_5_15min": load,
        "quick": q, "ranks": args.ranks,
        "rounds": args.rounds, "taus_us": args.taus, "compute_time_us": compute_us,
        "step_sizes": lrs, "target": TARGET, "launcher": args.launcher,
        "virtual_per_round_us": per_round,
        "virtual_time_to_target_s": {r["method"] + f"@tau={r['tau_us']:g}": r["virtual_time_to_target_s"]
                                     for r in rows},
        "all_equal_to_simulator_oracle": all(r["oracle_equal"] for r in rows),
        "alg3_vs_alg1": {"tau_us": t5, "alg3_per_round_us": a3["per_round_us"],
                         "alg1_per_round_us": a1["per_round_us"],
                         "alg1_over_alg3": a1["per_round_us"] / a3["per_round_us"]},
        "probes": [{k: v for k, v in p.items() if k != "exchange_ms"} for p in probes],
        "real_2ranks": real_rows,
        "runs": rows,  # every virtual-clock run, with its (virtual_time_s, error) curve
        "files": [str(out / f"{stem}.csv")] + pngs,
    }
    write_json(out / f"{stem}.json", summary)
    print(json.dumps({k: summary[k] for k in ("virtual_per_round_us", "alg3_vs_alg1",
                                              "all_equal_to_simulator_oracle")}, indent=1))
    print("wrote", ", ".join(summary["files"]), "and", out / f"{stem}.json")
    return 0 if summary["all_equal_to_simulator_oracle"] else 1


if __name__ == "__main__":
    sys.exit(main())
