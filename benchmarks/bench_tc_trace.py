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

It found why Teleportation's rounds missed the bound where single flows met it: under
tbf's one FIFO a connection's ACKs waited behind another connection's data, and of two
messages crossing one each way, one took up to twice its time (jobs/README.md, "The bed's
link").
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_tc_bandwidth as bed  # noqa: E402  (the bed, its rates, the plan, TCP_ROUNDS)

CONFIG, FIRST, LAST = "teleportation-4-k2", 5, 20


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
    os.environ["NETNS_SHAPER"] = shaper
    bed.set_rate(mbit)
    try:
        plan = bed.round_pairs(CONFIG, 4, dim, 0, LAST)
        before = cpu_times()
        s_per_round, stamps = bed.tcp_rounds(plan, 8 * dim, FIRST)
        cpu = cpu_split(before, cpu_times())
    finally:
        bed.set_rate(None)
    message_s = 8 * dim * 8 / (mbit * 1e6)
    bound = bed.physical_bound_s(CONFIG, 4, dim, mbit, FIRST, LAST)
    rows = rounds_of(stamps, plan, message_s)
    print(f"{shaper}: {s_per_round:.4f} s a round = x{s_per_round / bound:.2f} the bound; CPU "
          + " ".join(f"{k} {v:.0%}" for k, v in cpu.items() if v >= 0.005))
    for r in rows:
        spans = " ".join(f"{m['from']}>{m['to']} {m['sent']:.2f}-{m['in']:.2f}" for m in r["messages"])
        print(f"  round {r['round']:2d}: {r['a_to_b']} A->B, {r['b_to_a']} B->A, "
              f"{r['round_in_messages']:.2f} message times | {spans}")
    return {"shaper": bed.tc_setting(), "s_per_round": s_per_round, "bound_s_per_round": bound,
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
    args = ap.parse_args(argv)
    if not bed.bed_up():
        return 1
    shapers = args.shapers.split(",")
    if bad := [s for s in shapers if s not in ("htb", "tbf")]:
        ap.error(f"--shapers takes htb and tbf, not {','.join(bad)}")
    traces = {s: trace(s, args.rate, args.dim) for s in shapers}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "bench_tc_trace" + (f"_{args.tag}" if args.tag else "")
    (out / f"{stem}.json").write_text(json.dumps({"rate_mbit": args.rate, "dim": args.dim, "traces": traces}))
    plot(traces, out / f"{stem}.png")
    print(f"bench_tc_trace: wrote {out / stem}.{{json,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
