"""What the timeline (``--trace``) costs a round: Teleportation's rounds under MPI
with the trace off, on, and in the package as it was before the trace existed.

    python benchmarks/bench_trace_overhead.py [--ranks 8] [--d 1e5] [--repeats 3]
                                              [--baseline-rev REV] [--out benchmarks/results]

Setting: n = ranks nodes, k = ranks // 2 tokens, ring, momentum 0.5, the synthetic
quadratic (``problems.quadratic``, sigma2 = zeta2 = 10) with d elements per token, driven as
the engine drives it between logging rounds (``backend.begin`` once, then
``backend.step(t)``: the compiled rounds on persistent channels, the default path).
Each launch (``mpirun -n ranks``, the script itself as ``--worker``) times, in the same
processes, blocks of R rounds of two back ends over the same schedule:

* ``off``: ``MpiBackend`` as a run without a trace has it;
* ``on``: the same, traced: ``backend.trace(Tracer)`` records every round's spans (round,
  plan, post, step, gradient, send, prepare, wait, sum) into the preallocated buffer.

the two take turns within each block (order rotated per block), bracketed by barriers;
block 0 is a warm-up. Per-round time: the median over the timed blocks. A third variant,
``base``, runs in launches of its own with ``PYTHONPATH`` pointing at the package as it was
at ``--baseline-rev`` (default: the commit before the trace, exported with ``git
archive`` into a temporary directory): "off within the noise of today". Launches of the
two kinds alternate, ``--repeats`` each.

Goals: on / off <= 1.03 at d = 1e5 on 8 ranks; off / base within the noise
(the spread of base over its own repeats). The machine this ran on may be shared: every
sample is saved, and the table gives the spread. On a busy or oversubscribed machine the
wall times move by tens of percent from launch to launch, far more than the trace costs;
so each launch also measures the recording itself on rank 0's CPU clock (a span's begin
and end into the buffer, ``span_cost_s``) and counts the spans a round records on the
busiest rank: their product is the trace's work per round, which the table sets against
the fastest block's round (the least disturbed).

Writes bench_trace_overhead.csv, .json and .png into --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASELINE_REV = "ed31903^"  # the package before the trace (the parent of its first commit)
SEED, LR, MOMENTUM = 0, 0.01, 0.5


def worker(args) -> int:
    from mpi4py import MPI

    from mpi_teleport.measure import RunSpec
    from mpi_teleport.measure import Quadratic
    from mpi_teleport.measure import MpiBackend
    from mpi_teleport.measure import Transport

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    k, d, R, blocks = max(2, n // 2), args.d, args.rounds, args.blocks
    transport = Transport(comm)
    total = (blocks + 1) * R
    names = ["base"] if args.base else ["off", "on"]
    backends, tracers = {}, {}
    for name in names:
        problem = Quadratic(n=n, d=d, sigma2=10.0, zeta2=10.0, seed=SEED)
        spec = RunSpec("teleportation", n, k, total, LR, topology="ring", momentum=MOMENTUM,
                       seed=SEED)
        backend = backends[name] = MpiBackend(problem, spec, transport)
        if name == "on":
            from mpi_teleport.measure import make_spans
            from mpi_teleport.measure import Tracer

            spans = make_spans(total, 1, total, node=rank, nvtx=None)
            tracers[name] = Tracer(Path(args.worker_out + ".trace.json"), spans)
            backend.trace(tracers[name])
        backend.begin(spec.phases()[0], 0, problem.initial())
    times: dict[str, list[float]] = {name: [] for name in names}
    for b in range(blocks + 1):
        order = names[b % len(names):] + names[:b % len(names)]
        for name in order:
            step = backends[name].step
            comm.Barrier()
            start = MPI.Wtime()
            for t in range(b * R, (b + 1) * R):
                step(t)
            comm.Barrier()
            if b > 0:
                times[name].append((MPI.Wtime() - start) / R)
    finals = {name: backends[name].state.x.copy() for name in names}
    same = all(np.array_equal(finals[names[0]], x) for x in finals.values())
    same = comm.allreduce(int(same), op=MPI.MIN) == 1
    spans = {name: int(t.spans.n) for name, t in tracers.items()}
    for backend in backends.values():
        backend.close()
    per_span = span_cost_s() if not args.base else None
    alone = self_cost_s(MPI.COMM_SELF) if rank == 0 and not args.base else None
    counts = comm.gather(spans.get("on", 0), root=0)
    if rank == 0:
        import mpi_teleport

        with open(args.worker_out, "w") as f:
            json.dump({"ranks": n, "k": k, "d": d, "rounds_per_block": R, "blocks": blocks,
                       "samples": times, "identical": same, "spans_per_rank": counts,
                       "rounds_traced": total, "span_cost_s": per_span,
                       "self_cost": alone,
                       "package": str(Path(mpi_teleport.__file__).parent)}, f)
    return 0


def span_cost_s(count: int = 200_000) -> float:
    """CPU seconds one span costs to record (a begin and an end into the buffer), measured
    in this process on its thread's CPU clock (a shared machine's other processes do not
    enter it): best of 5 runs of ``count``. Times the spans a round records, it is what the
    trace adds to a round's work."""
    import time as clock

    from mpi_teleport.measure import STEP, make_spans

    best = float("inf")
    for _ in range(5):
        s = make_spans(count, 1, count, nvtx=None)
        s.at(0)
        start = clock.thread_time()
        for _ in range(count):
            a = s.begin(STEP)
            s.end(STEP, a)
        best = min(best, (clock.thread_time() - start) / count)
    return best


def self_cost_s(comm, rounds: int = 5000, d: int = 10) -> dict:
    """The trace's whole cost per round, measured alone: one rank (``comm``: COMM_SELF) runs
    the same rounds of a tiny token (d = 10: the round is nearly all bookkeeping) untraced
    and traced, on its thread's CPU clock (best of 3 each): the difference is every cost of
    a traced round (the spans, the wrappers, the per-round bookkeeping), whatever the
    machine's load. Per span it is larger than ``span_cost_s``."""
    import time as clock

    from mpi_teleport.measure import RunSpec
    from mpi_teleport.measure import Quadratic
    from mpi_teleport.measure import MpiBackend
    from mpi_teleport.measure import Transport
    from mpi_teleport.measure import make_spans
    from mpi_teleport.measure import Tracer

    transport = Transport(comm)
    best = {"off": float("inf"), "on": float("inf")}
    spans = 0
    for _ in range(3):
        for name in ("off", "on"):
            problem = Quadratic(n=1, d=d, seed=SEED)
            spec = RunSpec("teleportation", 1, 1, rounds, LR, topology="ring", momentum=MOMENTUM,
                           seed=SEED)
            backend = MpiBackend(problem, spec, transport)
            tracer = None
            if name == "on":
                tracer = Tracer(Path(tempfile.gettempdir()) / "unused.json",
                                make_spans(rounds, 1, rounds, nvtx=None))
                backend.trace(tracer)
            backend.begin(spec.phases()[0], 0, problem.initial())
            start = clock.thread_time()
            for t in range(rounds):
                backend.step(t)
            best[name] = min(best[name], (clock.thread_time() - start) / rounds)
            if tracer is not None:
                spans = tracer.spans.n / rounds
            backend.close()
    return {"off_s": best["off"], "on_s": best["on"], "spans_per_round": spans,
            "extra_s_per_round": best["on"] - best["off"]}


def baseline_tree(rev: str) -> Path:
    """The package at ``rev``, exported into a temporary directory (read-only use of git)."""
    where = Path(tempfile.mkdtemp(prefix="bench_trace_base_"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "mpi_teleport"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def launch(args, base: Path | None) -> tuple[dict | None, str]:
    from mpi_teleport.measure import mpi_env, mpirun_command

    fd, result = tempfile.mkstemp(prefix="bench_trace_", suffix=".json")
    os.close(fd)
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--worker-out", result,
            "--d", str(args.d), "--rounds", str(args.rounds), "--blocks", str(args.blocks)]
    if base is not None:
        argv.append("--base")
    cmd = mpirun_command(args.ranks, argv)
    env = mpi_env(dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    env["PYTHONPATH"] = str(base if base is not None else ROOT)
    env.pop("MPI_TELEPORT_TRACE", None)
    print("+ " + ("PYTHONPATH=" + str(base) + " " if base else "") + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    note = ""
    try:
        proc.wait(timeout=args.timeout)
        if proc.returncode:
            note = f"mpirun exited with status {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        note = f"mpirun killed after {args.timeout:.0f}s"
    try:
        with open(result) as f:
            row = json.load(f)
    except (OSError, ValueError):
        row = None
    finally:
        for path in (result, result + ".trace.json"):
            if os.path.exists(path):
                os.unlink(path)
    return row, note


def summarise(launches: list[dict]) -> dict:
    """Medians per variant over every launch's per-launch median, the paired on/off ratio
    (within a launch: the same processes, interleaved blocks) and the spread."""
    per = {"base": [], "off": [], "on": []}
    best = {"base": [], "off": [], "on": []}
    ratios = []
    costs = []
    alone = []
    for row in launches:
        if row.get("self_cost"):
            alone.append(row["self_cost"]["extra_s_per_round"] / max(1, row["self_cost"]["spans_per_round"]))
        for name, values in row["samples"].items():
            if values:
                best[name].append(min(values))
        if row.get("span_cost_s") and row.get("spans_per_rank"):
            spans_per_round = max(row["spans_per_rank"]) / row["rounds_traced"]
            costs.append((spans_per_round, row["span_cost_s"]))
        med = {name: statistics.median(v) for name, v in row["samples"].items() if v}
        for name, value in med.items():
            per[name].append(value)
        if "on" in med and "off" in med:
            ratios.append(med["on"] / med["off"])
    out = {f"{name}_ms": [1e3 * v for v in values] for name, values in per.items()}
    out.update({f"{name}_best_ms": [1e3 * v for v in values] for name, values in best.items()})
    out["on_over_off"] = ratios
    if costs:  # the recording's own cost per round, on the busiest rank, against the round
        spans_per_round = statistics.median(c[0] for c in costs)
        per_span = statistics.median(c[1] for c in costs)
        fastest = min(best["off"] + best["base"]) if best["off"] + best["base"] else None
        out.update(spans_per_round=spans_per_round, span_cost_us=per_span * 1e6,
                   recording_us_per_round=spans_per_round * per_span * 1e6)
        if fastest:
            out["recording_over_fastest_round"] = spans_per_round * per_span / fastest
        if alone:  # the whole traced round's extra, per span, measured alone (1 rank)
            whole = statistics.median(alone) * spans_per_round
            out.update(whole_cost_us_per_round=whole * 1e6, whole_cost_us_per_span=statistics.median(alone) * 1e6)
            if fastest:
                out["whole_cost_over_fastest_round"] = whole / fastest
    if per["off"] and per["base"]:
        out["off_over_base"] = statistics.median(per["off"]) / statistics.median(per["base"])
        spread = (max(per["base"]) - min(per["base"])) / statistics.median(per["base"])
        out["base_spread"] = spread
    if ratios:
        out["on_over_off_median"] = statistics.median(ratios)
    return out


def plot(launches: list[dict], summary: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {"base": "#7f7f7f", "off": "#1f77b4", "on": "#d62728"}
    for i, name in enumerate(("base", "off", "on")):
        values = [1e3 * v for row in launches for v in row["samples"].get(name, [])]
        if values:
            left.scatter(np.full(len(values), i) + np.random.default_rng(i).uniform(-0.15, 0.15, len(values)),
                         values, s=10, color=colours[name], alpha=0.6)
            left.hlines(statistics.median(values), i - 0.3, i + 0.3, color="black")
    left.set_xticks([0, 1, 2], ["base (before)", "trace off", "trace on"])
    left.set_ylabel("ms per round (each dot: a block's mean)")
    left.set_title("per-round time")
    ratios = summary.get("on_over_off", [])
    right.bar(range(len(ratios)), [100 * (r - 1) for r in ratios], color="#d62728")
    right.axhline(3, color="black", linestyle="--", linewidth=1, label="goal: 3 %")
    right.axhline(0, color="black", linewidth=0.5)
    right.set_xlabel("launch")
    right.set_ylabel("on / off - 1 (%), medians of a launch")
    right.set_title("the trace's cost, paired within a launch")
    right.legend()
    if "recording_us_per_round" in summary:
        right.set_title("the trace's cost, paired within a launch\n(recording itself: "
                        f"{summary['recording_us_per_round']:.1f} us a round, "
                        f"{100 * summary.get('recording_over_fastest_round', 0):.2f} % of the "
                        "fastest round)", fontsize=10)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--d", type=float, default=1e5)
    parser.add_argument("--rounds", type=int, default=100, help="rounds per timed block (R)")
    parser.add_argument("--blocks", type=int, default=8, help="timed blocks per launch")
    parser.add_argument("--repeats", type=int, default=3, help="launches of each kind")
    parser.add_argument("--baseline-rev", default=BASELINE_REV,
                        help="the package before the trace (git revision; 'none': skip base)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mpirun")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--tag", default="", help="a suffix for the output files' names")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    parser.add_argument("--base", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.d = int(args.d)
    if args.worker:
        return worker(args)
    sys.path.insert(0, str(ROOT))
    base = None if args.baseline_rev == "none" else baseline_tree(args.baseline_rev)
    launches, notes = [], []
    load_start = os.getloadavg()
    began = time.time()
    for rep in range(args.repeats):
        trees = [None] if base is None else ([None, base] if rep % 2 == 0 else [base, None])
        for tree in trees:  # (the two kinds alternate, so a load change hits both)
            row, note = launch(args, tree)
            if note:
                notes.append(note)
                print(note, flush=True)
            if row is not None:
                row["kind"] = "base" if tree is not None else "current"
                launches.append(row)
                med = {k: 1e3 * statistics.median(v) for k, v in row["samples"].items() if v}
                print("  " + ", ".join(f"{k} {v:.3f} ms" for k, v in med.items())
                      + f" per round; identical {row['identical']} ({row['package']})", flush=True)
    if base is not None:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    summary = summarise(launches)
    meta = {"ranks": args.ranks, "d": args.d, "rounds_per_block": args.rounds,
            "blocks": args.blocks, "repeats": args.repeats, "baseline_rev": args.baseline_rev,
            "machine": platform.node(), "cpus": os.cpu_count(), "load_at_start": load_start,
            "load_at_end": os.getloadavg(), "wall_s": time.time() - began,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "notes": notes}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"bench_trace_overhead{('_' + args.tag) if args.tag else ''}"
    with open(stem.with_suffix(".json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, "launches": launches}, f, indent=1)
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["launch", "kind", "variant", "block", "ms_per_round"])
        for i, row in enumerate(launches):
            for name, values in row["samples"].items():
                for j, v in enumerate(values):
                    w.writerow([i, row["kind"], name, j, f"{1e3 * v:.6f}"])
    print()
    for name in ("base", "off", "on"):
        values = summary.get(f"{name}_ms", [])
        if values:
            print(f"{name:>4}: median of launches {statistics.median(values):.3f} ms per round "
                  f"(launches: {', '.join(f'{v:.3f}' for v in values)})")
    if "on_over_off_median" in summary:
        print(f"on / off (paired within launches): median {summary['on_over_off_median']:.4f} "
              f"({', '.join(f'{r:.4f}' for r in summary['on_over_off'])}); goal <= 1.03")
    if "recording_us_per_round" in summary:
        print(f"recording: {summary['spans_per_round']:.1f} spans a round on the busiest rank x "
              f"{summary['span_cost_us']:.2f} us a span = {summary['recording_us_per_round']:.1f} us "
              f"a round, {100 * summary.get('recording_over_fastest_round', 0):.3f} % of the fastest "
              f"block's round ({min(summary['off_best_ms'] + summary['base_best_ms']):.3f} ms)")
    if "whole_cost_us_per_round" in summary:
        print(f"the whole traced round's extra, measured alone (1 rank, d = 10): "
              f"{summary['whole_cost_us_per_span']:.2f} us a span, "
              f"{summary['whole_cost_us_per_round']:.1f} us a round here, "
              f"{100 * summary.get('whole_cost_over_fastest_round', 0):.3f} % of the fastest round")
    if "off_over_base" in summary:
        print(f"off / base: {summary['off_over_base']:.4f}; base's own spread over its launches "
              f"{100 * summary['base_spread']:.1f} %")
    print(f"load average at start {load_start[0]:.1f}, at end {os.getloadavg()[0]:.1f} "
          f"({os.cpu_count()} CPUs)")
    try:
        plot(launches, summary, stem.with_suffix(".png"),
             f"trace overhead: {args.ranks} ranks, d = {args.d:.0e}, {meta['date']}")
    except ImportError:
        print("(matplotlib missing: no PNG)")
    print(f"wrote {stem}.json, .csv, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
