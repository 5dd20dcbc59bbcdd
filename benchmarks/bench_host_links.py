"""The host-link model before and after links carry one round after the other.

    python benchmarks/bench_host_links.py --bench A.json,B.json [--trace RUN.json] --tag T

No runs of its own: it reads what the wire benchmark measured on the two-host bed
(``bench_tc_bandwidth.py`` RESULTS.json: per case the measured and predicted seconds per
round, the window of rounds, the step time on the critical path) and, optionally, the
timeline of one real run of Teleportation k = 2 there (``MPI_TELEPORT_TRACE``), and sets
beside them the virtual clock of both models, computed by the simulator's oracle for the
same rounds, with the run's step time as the modelled compute time:

- **new**: a message leaves when the host links it crosses are free of earlier phases'
  messages (``LatencyModel.departure_us``; the model as it is);
- **old**: every phase finds its links free (the oracle without its view of the links'
  busy times): a next holder that got its inputs early from its own host sent over a link
  still busy with the round's other messages.

Per traced round it gives the measured round (the last rank's end of it, less the round
before's) and both models' rounds, in message times at the link's TCP goodput. Writes
host_links_T.{csv,json,png} into --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import bench_tc_bandwidth as tc  # noqa: E402


def oracle(config: str, ranks: int, dim: int, mbit: float, compute_us: float, old: bool):
    """The simulator's oracle of the configuration's run under ``bw:GOODPUT,hosts:R``."""
    from mpi_teleport.measure import LatencySettings
    from mpi_teleport.measure import for_run

    spec = tc.config_spec(config, ranks, dim)
    latency = f"bw:{mbit * tc.TCP_GOODPUT / 1000:.6g},hosts:{ranks // len(tc.HOSTS)}"
    o = for_run(spec, LatencySettings(latency, "virtual", compute_us), dim, 8)
    if old:
        o.busy = None  # the oracle's path without the links' busy times: the model before
    return o


def round_ends(config: str, ranks: int, dim: int, mbit: float, compute_us: float, old: bool,
               last: int) -> np.ndarray:
    """The largest logical clock after each round 0 .. last - 1, microseconds."""
    o = oracle(config, ranks, dim, mbit, compute_us, old)
    ends = []
    for r in range(1, last + 1):
        o.advance_to(r)
        ends.append(o.clock.max())
    return np.array(ends)


def cases(bench: dict) -> list[dict]:
    """Each measured case with both models' predictions for its window of rounds."""
    rows = []
    for row in bench["rows"]:
        first, last = row["first_round"], row["last_round"]
        step = max(0.0, row["predicted_s_per_round"] - row["bound_s_per_round"] / tc.TCP_GOODPUT)
        got = {}
        for name, old in (("new", False), ("old", True)):
            ends = round_ends(row["config"], row["ranks"], row["dim"], row["rate_mbit"], step * 1e6,
                              old, last)
            got[name] = (ends[last - 1] - ends[first - 1]) / 1e6 / (last - first)
        measured, bound = row["measured_s_per_round"], row["bound_s_per_round"]
        rows.append({"config": row["config"], "implementation": row["implementation"],
                     "repeat": row.get("repeat", 0),
                     "message_bytes": row["message_bytes"], "rate_mbit": row["rate_mbit"],
                     "rounds": f"{first}-{last}", "load_before": row["load_before"],
                     "load_after": row["load_after"], "measured_s_per_round": measured,
                     "bound_s_per_round": bound, "step_s_per_round": step,
                     "predicted_layer_s_per_round": row["predicted_s_per_round"],
                     "predicted_new_s_per_round": got["new"], "predicted_old_s_per_round": got["old"],
                     "measured_over_bound": measured / bound,
                     "layer_over_measured": row["predicted_s_per_round"] / measured,
                     "new_over_measured": got["new"] / measured,
                     "old_over_measured": got["old"] / measured,
                     "new_over_bound": got["new"] / bound, "old_over_bound": got["old"] / bound,
                     "bare_over_bound": row.get("bare_over_bound")})
    return rows


def traced_rounds(trace_path: str, mbit: float, dim: int, compute_us: float, skip: int) -> list[dict]:
    """Per round of a traced Teleportation k = 2 run on 2 + 2 ranks: the measured round and
    both models', in message times (a message's bytes over the link's goodput)."""
    from mpi_teleport.measure import chrome

    ends: dict[int, float] = {}
    for e in chrome.load(trace_path)["traceEvents"]:
        if e.get("ph") == "X" and e.get("name") == "round":
            t = e["args"]["round"]
            ends[t] = max(ends.get(t, 0.0), e["ts"] + e["dur"])
    last = max(ends) + 1
    model = {name: round_ends("teleportation-4-k2", 4, dim, mbit, compute_us, old, last)
             for name, old in (("new", False), ("old", True))}
    message_us = tc.wire_s(8 * dim, mbit * tc.TCP_GOODPUT) * 1e6
    out = []
    for t in range(skip, last):
        if t in ends and t - 1 in ends:
            out.append({"round": t, "measured": (ends[t] - ends[t - 1]) / message_us,
                        "new": (model["new"][t] - model["new"][t - 1]) / message_us,
                        "old": (model["old"][t] - model["old"][t - 1]) / message_us})
    return out


def plot(rows: list[dict], per_round: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if per_round else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    ax = axes[0][0]
    def case(r: dict) -> str:
        return f"{r['config']}\n{r['message_bytes'] / 1e6:g} MB, {r['implementation']}"

    configs = list(dict.fromkeys(case(r) for r in rows))
    for x, config in enumerate(configs):
        mine = [r for r in rows if case(r) == config]
        for key, colour, dx, label in (("old_over_measured", "tab:red", -0.12, "old model"),
                                       ("new_over_measured", "tab:blue", 0.0, "new model (oracle)"),
                                       ("layer_over_measured", "tab:green", 0.12, "new model (MPI layer)")):
            ys = [r[key] for r in mine]
            ax.plot([x + dx] * len(ys), ys, "o", color=colour, alpha=0.6,
                    label=label if x == 0 else None)
            ax.plot([x + dx - 0.05, x + dx + 0.05], [statistics.median(ys)] * 2, color=colour, lw=2)
    ax.axhspan(0.95, 1.05, color="0.9", zorder=0)
    ax.axhline(1.0, color="0.5", lw=0.8)
    ax.set_xticks(range(len(configs)), configs, fontsize=7)
    ax.set_ylabel("predicted / measured (s per round)")
    ax.set_title("100 Mbit/s, two hosts (each run a dot)")
    ax.legend(fontsize=8)
    if per_round:
        ax = axes[0][1]
        t = [r["round"] for r in per_round]
        for key, style, label in (("measured", "k-", "measured"), ("new", "b--", "new model"),
                                  ("old", "r:", "old model")):
            ax.step(t, np.cumsum([r[key] for r in per_round]), style, where="post", label=label)
        ax.set_xlabel("round")
        ax.set_ylabel(f"time since round {t[0] - 1} ends (message times)")
        ax.set_title("Teleportation k = 2, one traced run: rounds summed")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True,
                        help="bench_tc_bandwidth.py's results (.json files, comma-separated)")
    parser.add_argument("--trace", default="", help="a traced real run of teleportation-4-k2")
    parser.add_argument("--trace-step-us", type=float, default=None,
                        help="the modelled step of the traced run (default: the median step of "
                             "the bench's Teleportation rows)")
    parser.add_argument("--trace-dim", type=int, default=250000, help="the traced run's --dim")
    parser.add_argument("--trace-rate", type=float, default=100.0, help="the traced run's Mbit/s")
    parser.add_argument("--skip", type=int, default=16, help="traced rounds left out at the start")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    rows = []
    for path in args.bench.split(","):
        bench = json.loads(Path(path).read_text())
        rows += [dict(r, source=Path(path).name) for r in cases(bench)]
    for r in rows:
        print(f"{r['config']:20s} {r['message_bytes'] / 1e6:g} MB {r['implementation']} run {r['repeat']}: measured {r['measured_s_per_round']:.4f} s/round "
              f"(x{r['measured_over_bound']:.3f} the bound), predicted / measured: old "
              f"{r['old_over_measured']:.3f}, new {r['new_over_measured']:.3f} (oracle), "
              f"{r['layer_over_measured']:.3f} (MPI layer); load {r['load_before']:.1f}-{r['load_after']:.1f}")
    per_round: list[dict] = []
    if args.trace:
        tele = [r["step_s_per_round"] for r in rows if r["config"] == "teleportation-4-k2"
                and r["message_bytes"] == 8 * args.trace_dim]
        step = args.trace_step_us if args.trace_step_us is not None else statistics.median(tele) * 1e6
        per_round = traced_rounds(args.trace, args.trace_rate, args.trace_dim, step, args.skip)
        for key in ("measured", "new", "old"):
            print(f"traced rounds {per_round[0]['round']}-{per_round[-1]['round']}, {key}: "
                  f"{sum(r[key] for r in per_round):.2f} message times")
    out = Path(args.out)
    stem = f"host_links_{args.tag}" if args.tag else "host_links"
    with open(out / f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    about = {"what": "predicted / measured seconds per round on the two-host tc bed, the "
                     "host-link model before (old: links free at every phase) and after (new: a "
                     "link carries one phase after the other)", "bench": args.bench,
             "trace": args.trace, "rows": rows, "traced_rounds": per_round}
    (out / f"{stem}.json").write_text(json.dumps(about, indent=1))
    plot(rows, per_round, out / f"{stem}.png")
    print(f"bench_host_links: wrote {out}/{stem}.{{csv,json,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
