"""Where the time of a traced run went: the numbers ``python -m mpi_teleport.trace FILE``
prints (and draws with ``--png``, compares with ``--compare``).

Times are each span's *own* time (its duration less the spans nested in it: a step's own
time is the optimizer's arithmetic, its gradient is apart), so the parts of a round add up
to the round; ``round (rest)`` is what the round spent outside its parts (bookkeeping).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from .spans import COMMUNICATION, KINDS

WAITS = ("wait", "handover", "barrier", "agree")  # time a rank spends waiting for others


@dataclass
class Span:
    pid: int
    name: str
    ts: float  # microseconds
    dur: float
    round: int
    token: int
    own: float = 0.0  # dur less the spans directly nested in it
    depth: int = 0  # spans it is nested in
    children: list = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Trace:
    """A trace file's spans, by process, with their own times."""

    spans: list
    pids: list
    other: dict
    names: dict  # pid -> its name ("rank 3", "node 7")

    @property
    def label(self) -> str:
        return "node" if self.other.get("processes") == "node" else "rank"

    @property
    def virtual(self) -> bool:
        return str(self.other.get("clock", "")).startswith("virtual")

    def wall_us(self) -> float:
        if not self.spans:
            return 0.0
        return max(s.end for s in self.spans) - min(s.ts for s in self.spans)


def events(data) -> list[dict]:
    """A loaded file's ``traceEvents``, or ValueError saying why it is not a trace."""
    if not isinstance(data, dict) or "traceEvents" not in data:
        raise ValueError("no traceEvents: not a trace (a file --trace PATH wrote)")
    found = data["traceEvents"]
    if not isinstance(found, list):
        raise ValueError(f"traceEvents is not a list of events ({type(found).__name__})")
    bad = next((i for i, e in enumerate(found) if not isinstance(e, dict)), None)
    if bad is not None:
        raise ValueError(f"event {bad} is not an object ({type(found[bad]).__name__})")
    if not isinstance(data.get("otherData", {}), dict):
        raise ValueError("otherData is not an object")
    return found


def read(data: dict) -> Trace:
    """The spans of a loaded trace file (see :func:`mpi_teleport.trace.chrome.load`),
    nested per process as the viewers nest them (by start, the longer first)."""
    names, spans = {}, []
    for i, e in enumerate(events(data)):
        try:
            if e.get("ph") == "M" and e.get("name") == "process_name":
                names[int(e["pid"])] = str(e["args"]["name"])
            elif e.get("ph") == "X":
                args = e.get("args", {})
                spans.append(Span(int(e["pid"]), str(e["name"]), float(e["ts"]),
                                  float(e["dur"]), int(args.get("round", -1)),
                                  int(args.get("token", -1))))
        except KeyError as exc:
            raise ValueError(f"event {i} ({e.get('ph')!r}) has no {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"event {i} ({e.get('ph')!r}) is not a trace event: {exc}") from None
    spans.sort(key=lambda s: (s.pid, s.ts, -s.dur))
    stack: list[Span] = []
    pid = None
    for s in spans:
        s.own = s.dur
        if s.pid != pid:
            stack, pid = [], s.pid
        while stack and s.ts >= stack[-1].end - 1e-3:  # (ends rounded to the nanosecond)
            stack.pop()
        if stack:
            stack[-1].own -= s.dur
            stack[-1].children.append(s)
        s.depth = len(stack)
        stack.append(s)
    for s in spans:
        s.own = max(0.0, s.own)
    pids = sorted({s.pid for s in spans} | set(names))
    return Trace(spans, pids, data.get("otherData", {}), names)


def part_name(s: Span) -> str:
    """The part a span's own time counts to: a round's rest, a step's own arithmetic
    (the optimizer's, where its gradient is a span of its own)."""
    if s.name == "round":
        return "round (rest)"
    if s.name == "step" and s.children:
        return "step (optimizer)"
    return s.name


def per_part(trace: Trace) -> dict[str, dict[int, float]]:
    """part -> pid -> own time (microseconds)."""
    out: dict[str, dict[int, float]] = {}
    for s in trace.spans:
        by_pid = out.setdefault(part_name(s), {})
        by_pid[s.pid] = by_pid.get(s.pid, 0.0) + s.own
    return out


def round_times(trace: Trace) -> dict[int, tuple[float, float]]:
    """round -> (earliest start, latest end) of its round spans over the processes."""
    out: dict[int, list[float]] = {}
    for s in trace.spans:
        if s.name == "round":
            got = out.setdefault(s.round, [s.ts, s.end])
            got[0], got[1] = min(got[0], s.ts), max(got[1], s.end)
    return {r: (a, b) for r, (a, b) in sorted(out.items())}


def round_lengths(trace: Trace) -> dict[int, float]:
    """round -> its length: how far its latest end moved past the previous round's latest
    end (the first recorded round, or one after a gap: its own extent). Under the virtual
    clock this is the increment of the largest clock, as virtual_time_s counts it."""
    times = round_times(trace)
    out, prev = {}, None
    for r, (a, b) in times.items():
        if prev is not None and prev[0] == r - 1:
            out[r] = b - prev[1]
        else:
            out[r] = b - a
        prev = (r, b)
    return out


def typical_round(trace: Trace) -> int | None:
    """The recorded round whose length is the median's (the lower one of two)."""
    lengths = round_lengths(trace)
    if not lengths:
        return None
    ordered = sorted(lengths, key=lambda r: (lengths[r], r))
    return ordered[(len(ordered) - 1) // 2]


def critical_path(trace: Trace, r: int) -> list[tuple[int, str, float]]:
    """Round r's chain, walked back from the process that finished it last: its parts in
    order; where it waited, the process whose send of the round started last before that
    wait ended (the message most likely waited for), from its step on. A reading of
    the spans, not of the messages: (pid, part, microseconds) in time order."""
    rounds = [s for s in trace.spans if s.name == "round" and s.round == r]
    if not rounds:
        return []
    last = max(rounds, key=lambda s: s.end)
    chain: list[tuple[int, str, float]] = []
    parts = sorted(last.children, key=lambda s: s.ts)
    waits = [p for p in parts if p.name in ("wait", "handover")]
    if waits:
        wait = max(waits, key=lambda s: s.dur)
        sends = [s for s in trace.spans if s.name in ("send", "step") and s.round == r
                 and s.pid != last.pid and s.ts <= wait.end]
        sender = max(sends, key=lambda s: s.end, default=None)
        if sender is not None and wait.dur > 0:
            rnd = next((s for s in rounds if s.pid == sender.pid), None)
            before = sorted(rnd.children, key=lambda s: s.ts) if rnd else []
            chain += [(sender.pid, p.name, p.dur) for p in before if p.ts <= sender.ts]
            chain.append((last.pid, f"{wait.name} (after rank {sender.pid}'s {sender.name})"
                          if trace.label == "rank" else f"{wait.name} (after node {sender.pid})",
                          max(0.0, wait.end - sender.end)))
            parts = [p for p in parts if p.ts >= wait.end - 1e-3 and p is not wait]
    chain += [(last.pid, p.name, p.dur) for p in parts]
    return chain


def waited_most(trace: Trace, top: int = 5) -> list[tuple[int, float, float]]:
    """(pid, microseconds waiting, share of its spans' time) of the processes that waited
    most (waits, hand-overs, barriers, agreements)."""
    waited: dict[int, float] = {}
    busy: dict[int, float] = {}
    for s in trace.spans:
        if s.name in WAITS:
            waited[s.pid] = waited.get(s.pid, 0.0) + s.own
        if s.name in ("round", "log", "checkpoint", "agree", "keep", "recover", "join"):
            busy[s.pid] = busy.get(s.pid, 0.0) + s.dur
    ranked = sorted(waited.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [(pid, w, w / busy[pid] if busy.get(pid) else 0.0) for pid, w in ranked]


def part_rows(trace: Trace) -> list[dict]:
    """One row per part: its share of the processes' wall time, its median and slowest
    process (own time, ms), how many processes have it, and its kind."""
    parts = per_part(trace)
    wall = trace.wall_us()
    n = max(1, len(trace.pids))
    rows = []
    order = {name: i for i, name in enumerate(("round (rest)", "step (optimizer)") + KINDS)}
    for name in sorted(parts, key=lambda k: order.get(k, 99)):
        by_pid = parts[name]
        values = [by_pid.get(p, 0.0) for p in trace.pids]
        slow = max(by_pid, key=lambda p: (by_pid[p], -p))
        base = name.split(" ")[0]
        rows.append({
            "part": name,
            "kind": "communication" if base in COMMUNICATION else
                    ("round" if base == "round" else "computation"),
            "share": sum(values) / (wall * n) if wall else 0.0,
            "median_ms": statistics.median(values) / 1e3,
            "slowest_ms": by_pid[slow] / 1e3,
            "slowest": slow,
            "processes": len(by_pid),
        })
    return rows


def per_round(trace: Trace) -> dict[str, float]:
    """Each part's mean time (microseconds, its whole span: a step with its gradient) per
    process and round it appears in, and the median round length (``round``)."""
    total: dict[str, float] = {}
    seen: dict[str, set] = {}
    for s in trace.spans:
        if s.name == "round":
            continue
        total[s.name] = total.get(s.name, 0.0) + s.dur
        seen.setdefault(s.name, set()).add((s.pid, s.round))
    out = {name: total[name] / len(seen[name]) for name in total}
    lengths = list(round_lengths(trace).values())
    if lengths:
        out["round"] = float(np.median(lengths))
    return out


def report(trace: Trace) -> str:
    """The text ``python -m mpi_teleport.trace FILE`` prints."""
    label = trace.label
    lines = []
    wall = trace.wall_us()
    clock = "virtual (simulated nodes' logical clocks)" if trace.virtual else "real"
    lengths = round_lengths(trace)
    lines.append(f"{len(trace.pids)} {label}s, {len(lengths)} rounds recorded, "
                 f"{wall / 1e3:.3f} ms from the first span to the last ({clock} time)")
    dropped = trace.other.get("dropped") or {}
    if dropped:
        lines.append(f"spans dropped (buffer full): {sum(dropped.values())} "
                     f"(raise MPI_TELEPORT_TRACE_ROUNDS' buffer or sample with MPI_TELEPORT_TRACE_EVERY)")
    lines.append("")
    lines.append(f"{'part':<16} {'kind':<14} {'share':>7} {'median ' + label:>14} "
                 f"{'slowest ' + label:>20}")
    for row in part_rows(trace):
        lines.append(f"{row['part']:<16} {row['kind']:<14} {100 * row['share']:6.1f}% "
                     f"{row['median_ms']:11.3f} ms {row['slowest_ms']:11.3f} ms ({label} "
                     f"{row['slowest']})")
    covered = sum(row["share"] for row in part_rows(trace))
    lines.append(f"{'(no span)':<16} {'':<14} {100 * max(0.0, 1 - covered):6.1f}%   "
                 f"between the spans (the loop itself, idle before the first or after the last)")
    r = typical_round(trace)
    if r is not None:
        lines.append("")
        lines.append(f"typical round: {r} ({lengths[r] / 1e3:.3f} ms, the median of "
                     f"{len(lengths)}); its critical path, back from the {label} that finished it last:")
        for pid, part, us in critical_path(trace, r):
            lines.append(f"  {label} {pid:<5} {part:<40} {us / 1e3:9.3f} ms")
    most = waited_most(trace)
    if most:
        lines.append("")
        lines.append(f"{label}s that waited most (waits, hand-overs, barriers, agreements):")
        for pid, us, share in most:
            lines.append(f"  {label} {pid:<5} {us / 1e3:9.3f} ms  ({100 * share:.1f}% of its spans' time)")
    return "\n".join(lines)


def compare(real: Trace, sim: Trace) -> str:
    """A run beside its simulation: each part's mean time per process and round, and the
    median round length, with the simulation's prediction over the run's."""
    a, b = per_round(real), per_round(sim)
    lines = [f"{'part':<16} {'run (ms)':>10} {'simulated (ms)':>15} {'sim/run':>8}"]
    order = ["round"] + [name for name in KINDS[1:] if name in a or name in b]
    for name in order:
        x, y = a.get(name), b.get(name)
        if x is None and y is None:
            continue
        ratio = f"{y / x:8.3f}" if x and y is not None and x > 1e-3 else f"{'-':>8}"
        fx = f"{x / 1e3:10.4f}" if x is not None else f"{'-':>10}"
        fy = f"{y / 1e3:15.4f}" if y is not None else f"{'-':>15}"
        lines.append(f"{name:<16} {fx} {fy} {ratio}")
    lines.append("(each part: its mean span per process and round it appears in, a step "
                 "with its gradient; 'round': the median round length. The simulation's clock: "
                 + ("virtual" if sim.virtual else "real") + ")")
    return "\n".join(lines)


COLOURS = {"round": "#dddddd", "step": "#1f77b4", "gradient": "#aec7e8", "post": "#ffbb78",
           "send": "#ff7f0e", "wait": "#d62728", "prepare": "#9467bd", "sum": "#2ca02c",
           "handover": "#8c564b", "plan": "#7f7f7f", "log": "#bcbd22", "barrier": "#e377c2",
           "gather": "#17becf", "evaluate": "#98df8a", "checkpoint": "#c49c94",
           "agree": "#f7b6d2", "recover": "#c5b0d5", "join": "#dbdb8d", "keep": "#9edae5",
           "flush": "#c7c7c7"}


def draw(trace: Trace, path, rounds: int = 3, title: str | None = None) -> None:
    """A PNG: each part's share of the wall time (left) and every process's timeline of
    the typical round and the ``rounds - 1`` after it (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in part_rows(trace) if row["share"] > 0]
    n = len(trace.pids)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, max(4.0, 0.22 * n + 2)),
                                      gridspec_kw={"width_ratios": [1, 2.4]})
    names = [row["part"] for row in rows]
    left.barh(range(len(rows)), [100 * row["share"] for row in rows],
              color=[COLOURS.get(name.split(" ")[0], "#999999") for name in names])
    left.set_yticks(range(len(rows)), names)
    left.invert_yaxis()
    left.set_xlabel("share of the wall time, all processes (%)")
    left.set_title("where the time went")
    r = typical_round(trace)
    if r is not None:
        wanted = set(range(r, r + rounds))
        shown = [s for s in trace.spans if s.round in wanted]
        t0 = min(s.ts for s in shown)
        row_of = {pid: i for i, pid in enumerate(trace.pids)}
        for s in sorted(shown, key=lambda s: s.depth):  # (nested spans drawn inside, thinner)
            height = 0.9 * 0.7 ** s.depth
            right.barh(row_of[s.pid], s.dur / 1e3, left=(s.ts - t0) / 1e3, height=height,
                       color=COLOURS.get(s.name, "#999999"), linewidth=0)
        right.set_yticks(range(n), [str(p) for p in trace.pids],
                         fontsize=7 if n > 30 else 9)
        right.invert_yaxis()
        right.set_ylabel(trace.label)
        right.set_xlabel("ms" + (" (virtual)" if trace.virtual else ""))
        right.set_title(f"rounds {r}-{r + rounds - 1} (round {r}: the typical one)")
        used = sorted({s.name for s in shown}, key=lambda k: KINDS.index(k))
        from matplotlib.patches import Patch

        right.legend(handles=[Patch(color=COLOURS.get(k, "#999999"), label=k) for k in used],
                     loc="upper center", bbox_to_anchor=(0.5, -0.09), fontsize=8,
                     ncol=min(len(used), 8), frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
