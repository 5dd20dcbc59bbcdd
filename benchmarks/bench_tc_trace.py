"""Where a chained round's time goes on the bed's links: Teleportation's messages over
plain TCP, every message stamped.

    python benchmarks/bench_tc_trace.py [--rate 400] [--dim 250000] [--shapers htb,tbf]
                                        [--out benchmarks/results] [--tag T]

Four processes, two per host of the namespace test bed (jobs/netns-cluster.sh; root), pass
the messages of a Teleportation run's rounds (k = 2 over 4 ranks, the run's own plan:
bench_tc_bandwidth.round_pairs) over plain TCP, no MPI: one connection a pair, a thread a
message, each round's senders starting when their previous round is done (Algorithm 3's
chain; bench_tc_bandwidth.TCP_ROUNDS). Every message is stamped on the machine's monotonic
clock, which the bed's hosts share. Per shaper (NETNS_SHAPER of jobs/netns-cluster.sh:
``htb``, the bed's, or ``tbf``, its older token bucket) it prints, round by round, the
messages crossing each direction of the link, the round's time in message times (a
message's bytes over the rate) and each crossing message's span, and the run's CPU split
(/proc/stat; softirq is mostly the bed forwarding packets). Writes bench_tc_trace[_T].json
(every stamp) and .png (the crossing messages on each direction against time, a panel a
shaper).

``--run IMPL`` traces a real run instead: ``mpi_teleport.run`` with the same case (no
latency layer: Algorithm 3's compiled rounds), under Open MPI or MPICH, with the run's own
timeline (``MPI_TELEPORT_TRACE``, mpi_teleport.trace; each span's CPU time with
``MPI_TELEPORT_TRACE_CPU=1``: every rank's local step, weighted sum and waits, the numbers
the run's own), and prints how long the steps took against their median (where the
bed's 4 ranks share 2 cores, a step of 1 ms can take 10) and how long each direction of
the link carried messages; writes bench_tc_trace_run[_T].json and .png (every rank's
waits, draws ahead, steps and sums against time). Per run it also says how much of the
2 cores the ranks used, and for what (:func:`cores_used`): draws ahead, steps, sums,
polling waits, and how much longer than their CPU time the draws took.

It found why Teleportation's rounds missed the bound where single flows met it: under
tbf's one FIFO a connection's ACKs waited behind another connection's data, and of two
messages crossing one each way, one took up to twice its time (benchmarks/results/wire-tc-bandwidth-2026-11-27.md, "The bed's
link").
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_tc_bandwidth as bed  # noqa: E402  (the bed, its rates, the plan, TCP_ROUNDS)

CONFIG, FIRST, LAST = "teleportation-4-k2", 5, 20


# A traced run's spans (mpi_teleport.trace: MPI_TELEPORT_TRACE, with each span's CPU time,
# MPI_TELEPORT_TRACE_CPU=1) as this script's stamps: (what, round, rank, start, end, CPU
# seconds of the rank's thread in between: less than end - start when the rank waited for a
# core). The run's own timeline: the trace changes no number.
KINDS_OF_STAMPS = {"round": "round", "step": "step", "sum": "sum", "wait": "wait",
                   "prepare": "meanwhile"}


def stamps_of_trace(data: dict) -> list[tuple]:
    """The stamps of a trace file's spans (a loaded mpi_teleport.trace file), in seconds on
    the trace's aligned clock: rounds, steps, sums, waits (those inside a pipelined sum
    too) and the draws done while waiting (``meanwhile``: the trace's ``prepare``)."""
    out = []
    for e in data["traceEvents"]:
        what = KINDS_OF_STAMPS.get(e.get("name")) if e.get("ph") == "X" else None
        if what is None:
            continue
        start = e["ts"] / 1e6
        out.append((what, e["args"]["round"], e["pid"], start, start + e["dur"] / 1e6,
                    e["args"].get("cpu_us", 0.0) / 1e6))
    return out


def run_steps(stamps: list, first: int, last: int) -> dict:
    """From a traced run's stamps, rounds first..last - 1 (first >= 1): seconds per round
    (from the end of round first - 1 at its last rank to the end of round last - 1 at its
    last rank, as the records' time_s counts), the local steps' median and largest time,
    and per round the longest step less the median (summed over the rounds, per round: the time the
    rounds' slowest steps added); and the wall and CPU time of the steps over 3x the
    median (CPU far below wall: the rank was waiting for a core)."""
    steps = [s for s in stamps if s[0] == "step" and first <= s[1] < last]
    ends = {t: max(e for what, u, _, _, e, _ in stamps if what == "round" and u == t) for t in (first - 1, last - 1)}
    median = sorted(e - b for *_, b, e, _ in steps)[len(steps) // 2]
    slowest = {}
    for _, t, _, b, e, _ in steps:
        slowest[t] = max(slowest.get(t, 0.0), e - b)
    slow = [(e - b, cpu) for *_, b, e, cpu in steps if e - b > 3 * median]
    span = ends[last - 1] - ends[first - 1]
    return {"s_per_round": span / (last - first), "step_median_s": median,
            "step_max_s": max(e - b for *_, b, e, _ in steps),
            "slow_steps_s": sum(w for w, _ in slow), "slow_steps_cpu_s": sum(c for _, c in slow),
            "rounds_with_a_step_over_3x_median": sum(1 for v in slowest.values() if v > 3 * median),
            "slow_steps_add_s_per_round": sum(v - median for v in slowest.values()) / (last - first)}


def cores_used(stamps: list, first: int, last: int) -> dict:
    """Rounds first..last - 1 of a traced run: the CPU its ranks spent per second of the
    rounds, in cores (the bed's 4 ranks share 2), by what they did: ``draws`` (the next
    step's noise drawn while waiting, ``meanwhile``), ``steps``, ``sums`` (less the waits
    for their blocks), ``waits`` (polling MPI) and ``rounds`` (all of it); and
    ``draws_wall_over_cpu``: the draws' time over their CPU time (above 1: a draw waited
    for a core)."""
    inside = [s for s in stamps if first <= s[1] < last]
    span = (max(e for what, t, *_, e, _ in inside if what == "round")
            - min(b for what, t, _, b, _, _ in inside if what == "round"))
    cpu: dict[str, float] = {}
    for what, *_, cpu_s in inside:
        cpu[what] = cpu.get(what, 0.0) + cpu_s
    sums: dict[tuple, list] = {}  # (round, rank) -> the sums' spans
    for what, t, rank, b, e, _ in inside:
        if what == "sum":
            sums.setdefault((t, rank), []).append((b, e))
    in_sums = sum(cpu_s for what, t, rank, b, e, cpu_s in inside if what == "wait" and any(
        sb <= b and e <= se for sb, se in sums.get((t, rank), ())))
    draws_wall = sum(e - b for what, _, _, b, e, _ in inside if what == "meanwhile")
    return {"draws": cpu.get("meanwhile", 0.0) / span, "steps": cpu.get("step", 0.0) / span,
            "sums": (cpu.get("sum", 0.0) - in_sums) / span, "waits": cpu.get("wait", 0.0) / span,
            "rounds": cpu.get("round", 0.0) / span,
            "draws_wall_over_cpu": draws_wall / cpu["meanwhile"] if cpu.get("meanwhile") else None}


def links_busy(stamps: list, plan: list, first: int, last: int, per_host: int = 2) -> dict:
    """Per direction of the host link, rounds first..last - 1 of a traced run: how many
    messages crossed it and for how long it carried any (the union of the messages' spans,
    each from its sender's step's end, when the send starts, to the end of its receiver's
    wait, or of its round where it waited for nothing)."""
    end = {}
    for what, t, rank, _, e, _ in stamps:
        if what in ("wait", "round"):
            end[what, t, rank] = e
    sent = {(t, rank): e for what, t, rank, _, e, _ in stamps if what == "step"}
    busy = {}
    for name, side in (("a_to_b", 0), ("b_to_a", 1)):
        spans = sorted((sent[t, s], end.get(("wait", t, d), end.get(("round", t, d))))
                       for t in range(first, last) for s, d in plan[t]
                       if s // per_host == side and d // per_host != side)
        total, covered = 0.0, -math.inf  # spans sorted by start: add what each adds
        for b, e in spans:
            total += max(0.0, e - max(b, covered))
            covered = max(covered, e)
        busy[name] = {"messages": len(spans), "busy_s": total}
    return busy


def trace_run(impl: str, mbit: float, dim: int, rounds: int = 40, extra: tuple = (),
              first: int | None = None) -> dict:
    """A traced run on the bed (``--trace``'s spans with their CPU time, read back by
    :func:`stamps_of_trace`): Teleportation (k = 2 over 4 ranks), ``rounds`` rounds, under
    ``impl``, with ``extra`` flags; the steps of rounds ``first`` (default rounds/2) ..
    rounds - 1 against the bound. It records at the end only: a record's loss needs the
    nodes' models, whose reduction crosses the link inside the rounds' span here (the
    records' time_s leaves it out)."""
    import tempfile

    from mpi_teleport.measure import load_trace as load

    python = dict(bed.implementations())[impl]
    with tempfile.TemporaryDirectory(prefix="bench-tc-trace-") as tmp:
        bed.set_rate(mbit)
        saved = {name: os.environ.get(name) for name in ("MPI_TELEPORT_TRACE", "MPI_TELEPORT_TRACE_CPU")}
        # (the launcher forwards both to the bed's other host)
        os.environ.update(MPI_TELEPORT_TRACE=f"{tmp}/trace.json", MPI_TELEPORT_TRACE_CPU="1")
        try:
            bed.launch_on_bed(python, 4, ["-m", "mpi_teleport.run", *bed.CONFIGS[CONFIG][1], "--nodes", "4",
                                          "--dim", str(dim), "--rounds", str(rounds), "--log-every", str(rounds),
                                          "--progress", "off", "--out", tmp + "/run", *extra], timeout=600)
        finally:
            bed.set_rate(None)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        stamps = stamps_of_trace(load(f"{tmp}/trace.json"))
    if sorted({s[2] for s in stamps}) != [0, 1, 2, 3]:
        raise RuntimeError(f"{impl}: stamps of ranks {sorted({s[2] for s in stamps})} only, not of all 4")
    first, last = (rounds // 2 if first is None else first), rounds
    got = run_steps(stamps, first, last)
    got["links"] = links_busy(stamps, bed.round_pairs(CONFIG, 4, dim, 0, last), first, last)
    got["cores"] = cores_used(stamps, first, last)
    bound = bed.physical_bound_s(CONFIG, 4, dim, mbit, first, last)
    got.update(implementation=impl, rate_mbit=mbit, dim=dim, flags=list(extra), first_round=first,
               last_round=last, bound_s_per_round=bound,
               over_bound=got["s_per_round"] / bound, stamps=stamps)
    print(f"{impl} run {' '.join(extra)}, {8 * dim / 1e6:g} MB at {mbit:g} Mbit/s: x{got['over_bound']:.2f} the bound; "
          f"local step median {got['step_median_s'] * 1e3:.1f} ms, largest {got['step_max_s'] * 1e3:.1f} ms; "
          f"{got['rounds_with_a_step_over_3x_median']} of {last - first} rounds had a step over 3x the median "
          f"({got['slow_steps_s'] * 1e3:.0f} ms, of which {got['slow_steps_cpu_s'] * 1e3:.0f} ms on a core); "
          f"the slowest steps add {got['slow_steps_add_s_per_round'] * 1e3:.1f} ms a round "
          f"(x{(got['s_per_round'] - got['slow_steps_add_s_per_round']) / bound:.2f} the bound without them)")
    used = got["cores"]
    print(f"  CPU of the 2 cores: the ranks {used['rounds']:.2f} cores, of which draws ahead "
          f"{used['draws']:.2f}, steps {used['steps']:.2f}, sums {used['sums']:.2f}, polling waits "
          f"{used['waits']:.2f}" + (f"; the draws took x{used['draws_wall_over_cpu']:.1f} their CPU time"
                                    if used["draws_wall_over_cpu"] else ""))
    message_s, span = bed.wire_s(8 * dim, mbit), got["s_per_round"] * (last - first)
    for name, link in got["links"].items():
        print(f"  {name.replace('_', ' ')}: {link['messages']} messages, the link busy {link['busy_s'] / message_s:.1f} "
              f"message times of the rounds' {span / message_s:.1f} (bound of the rounds: "
              f"{bound * (last - first) / message_s:.1f})")
    return got


def plot_runs(runs: list[dict], path: Path) -> None:
    """Each traced run a panel: every rank's waits, draws meanwhile, steps and sums against
    time (message times since round first - 1 ended)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colours = {"wait": "#9ecae1", "meanwhile": "#bdbdbd", "step": "#d62728", "sum": "#2ca02c"}
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 2.2 * len(runs) + 0.6), squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        message_s = bed.wire_s(8 * run["dim"], run["rate_mbit"])
        first = run["first_round"]
        t0 = max(e for what, t, _, _, e, _ in run["stamps"] if what == "round" and t == first - 1)
        for what, t, rank, b, e, _ in run["stamps"]:
            if what in colours and t >= first:
                ax.barh(rank, (e - b) / message_s, left=(b - t0) / message_s, height=0.6,
                        color=colours[what], linewidth=0)
        ax.set_yticks(range(4))
        ax.set_yticklabels([f"rank {r} (host {'AB'[r // 2]})" for r in range(4)], fontsize=8)
        ax.set_xlim(0, run["s_per_round"] * (run["last_round"] - first) / message_s)
        ax.set_title(f"{run['implementation']} {' '.join(run['flags'])}: {run['dim'] * 8 / 1e6:g} MB at "
                     f"{run['rate_mbit']:g} Mbit/s, x{run['over_bound']:.2f} the bound", fontsize=9)
    axes[-1, 0].set_xlabel("message times since the traced rounds began")
    handles = [Patch(color=c, label=w) for w, c in colours.items()]
    axes[0, 0].legend(handles=handles, fontsize=7, ncol=4, loc="upper right")
    fig.suptitle("Teleportation runs on the bed: each rank's waits, draws ahead, steps and sums")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cpu_times() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]


def cpu_split(before: list[int], after: list[int]) -> dict:
    """Shares of the machine's CPU time between two /proc/stat readings."""
    d = [b - a for a, b in zip(before, after)]
    total = sum(d) or 1
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq")
    return {name: round(v / total, 3) for name, v in zip(names, d)}


def rounds_of(stamps: list, plan: list, message_s: float, per_host: int = 2) -> list[dict]:
    """Round by round (FIRST..): the messages crossing each way, the round's time (first
    send called to last byte in) and each crossing message's span (send called, last byte
    in), in message times from the round's start."""
    rows = []
    for t in range(FIRST, len(plan)):
        sends = {(s[2], s[3]): s for s in stamps if s[0] == "send" and s[1] == t}
        recvs = {(s[2], s[3]): s for s in stamps if s[0] == "recv" and s[1] == t}
        start, end = min(s[4] for s in sends.values()), max(s[5] for s in recvs.values())
        cross = sorted(p for p in recvs if p[0] // per_host != p[1] // per_host)
        rows.append({
            "round": t, "start_s": start, "end_s": end,
            "a_to_b": sum(1 for s, d in cross if s // per_host == 0),
            "b_to_a": sum(1 for s, d in cross if s // per_host == 1),
            "round_in_messages": (end - start) / message_s,
            "messages": [{"from": s, "to": d, "sent": (sends[s, d][4] - start) / message_s,
                          "in": (recvs[s, d][5] - start) / message_s} for s, d in cross]})
    return rows


def trace(shaper: str, mbit: float, dim: int) -> dict:
    """Teleportation's rounds over plain TCP (bed.TCP_ROUNDS) under ``shaper``, printed
    round by round; the stamps, the rounds and the CPU split."""
    before_shaper = os.environ.get("NETNS_SHAPER")
    os.environ["NETNS_SHAPER"] = shaper
    try:
        bed.set_rate(mbit)
        plan = bed.round_pairs(CONFIG, 4, dim, 0, LAST)
        before = cpu_times()
        s_per_round, stamps = bed.tcp_rounds(plan, 8 * dim, FIRST)
        cpu = cpu_split(before, cpu_times())
        setting = bed.tc_setting()
    finally:
        bed.set_rate(None)
        if before_shaper is None:
            os.environ.pop("NETNS_SHAPER")
        else:
            os.environ["NETNS_SHAPER"] = before_shaper
    message_s = bed.wire_s(8 * dim, mbit)
    bound = bed.physical_bound_s(CONFIG, 4, dim, mbit, FIRST, LAST)
    rows = rounds_of(stamps, plan, message_s)
    print(f"{shaper}: {s_per_round:.4f} s a round = x{s_per_round / bound:.2f} the bound; CPU "
          + " ".join(f"{k} {v:.0%}" for k, v in cpu.items() if v >= 0.005))
    for r in rows:
        spans = " ".join(f"{m['from']}>{m['to']} {m['sent']:.2f}-{m['in']:.2f}" for m in r["messages"])
        print(f"  round {r['round']:2d}: {r['a_to_b']} A->B, {r['b_to_a']} B->A, "
              f"{r['round_in_messages']:.2f} message times | {spans}")
    return {"shaper": setting, "s_per_round": s_per_round, "bound_s_per_round": bound,
            "over_bound": s_per_round / bound, "message_s": message_s, "cpu": cpu,
            "rounds": rows, "stamps": stamps}


def plot(traces: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(traces), 1, figsize=(11, 2.6 * len(traces)), squeeze=False)
    for ax, (shaper, tr) in zip(axes[:, 0], traces.items()):
        t0 = tr["rounds"][0]["start_s"]
        for r in tr["rounds"]:
            base = (r["start_s"] - t0) / tr["message_s"]
            for i, m in enumerate(r["messages"]):
                lane = (0 if m["from"] < 2 else 1) + 0.18 * (i % 3)
                ax.barh(lane, m["in"] - m["sent"], left=base + m["sent"], height=0.15,
                        color="C0" if r["round"] % 2 else "C1", edgecolor="k", linewidth=0.3)
        ax.set_yticks([0.15, 1.15])
        ax.set_yticklabels(["host A -> B", "host B -> A"])
        ax.set_title(f"{shaper}: x{tr['over_bound']:.2f} the bound, softirq {tr['cpu'].get('softirq', 0):.0%} "
                     "of the CPU", fontsize=9)
    axes[-1, 0].set_xlabel("message times since the first traced round (each bar a message: send called .. last byte in)")
    fig.suptitle("Teleportation's rounds over plain TCP on the bed, every crossing message")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=400.0, help="Mbit/s on every host link")
    ap.add_argument("--dim", type=int, default=250000, help="quadratic dimension (8 d bytes a message)")
    ap.add_argument("--shapers", default="htb,tbf", help="NETNS_SHAPER values to trace in turn")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--run", default="", help="openmpi or mpich (comma-separated): trace real "
                    "runs' local steps instead of plain TCP")
    ap.add_argument("--run-flags", default="", help="more flags for those runs, e.g. '--sigma2 0'")
    ap.add_argument("--rounds", type=int, default=40, help="rounds of a traced run")
    ap.add_argument("--first", type=int, default=None, help="its first traced round (default: half way)")
    args = ap.parse_args(argv)
    if not bed.bed_up():
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.run:
        runs = [trace_run(impl, args.rate, args.dim, args.rounds, tuple(args.run_flags.split()), args.first)
                for impl in args.run.split(",")]
        stem = "bench_tc_trace_run" + (f"_{args.tag}" if args.tag else "")
        (out / f"{stem}.json").write_text(json.dumps(runs))
        plot_runs(runs, out / f"{stem}.png")
        print(f"bench_tc_trace: wrote {out / stem}.{{json,png}}")
        return 0
    shapers = args.shapers.split(",")
    if bad := [s for s in shapers if s not in ("htb", "tbf")]:
        ap.error(f"--shapers takes htb and tbf, not {','.join(bad)}")
    traces = {s: trace(s, args.rate, args.dim) for s in shapers}
    stem = "bench_tc_trace" + (f"_{args.tag}" if args.tag else "")
    (out / f"{stem}.json").write_text(json.dumps({"rate_mbit": args.rate, "dim": args.dim, "traces": traces}))
    plot(traces, out / f"{stem}.png")
    print(f"bench_tc_trace: wrote {out / stem}.{{json,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
