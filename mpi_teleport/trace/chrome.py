"""The Chrome trace-event file (opens in https://ui.perfetto.dev and chrome://tracing).

One process per rank (``pid`` = rank; in the simulator, per simulated node), each span a
complete event (``"ph": "X"``, microseconds since the aligned start) named for its part
of the round (:data:`~.spans.KINDS`), in category ``computation``, ``communication`` or
``round``, with ``args`` round, node, token (and peer where one). Metadata events name
the processes; ``otherData`` holds how the clocks were aligned (every rank's offset
against rank 0), the limits and what was dropped.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .spans import KINDS, category


def events(parts: list[tuple[dict, np.ndarray]]) -> tuple[list[dict], dict]:
    """The trace events of every process's spans, and the ``otherData``."""
    out: list[dict] = []
    pids: dict[int, str] = {}
    offsets, dropped = {}, {}
    clock = "real"
    for meta, spans in parts:
        rank, zero = int(meta["rank"]), float(meta["zero"])
        clock = meta.get("clock", "real")
        offsets[str(rank)] = meta.get("offset_s", 0.0)
        if meta.get("dropped"):
            dropped[str(rank)] = meta["dropped"]
        by_node = meta.get("pid_from") == "node"
        if len(spans) == 0:
            if not by_node:
                pids.setdefault(rank, f"rank {rank}")
            continue
        starts = np.round((spans["start"] - zero) * 1e6, 3)
        ends = np.round((spans["end"] - zero) * 1e6, 3)
        cpu = spans["cpu"] if "cpu" in (spans.dtype.names or ()) else np.full(len(spans), np.nan)
        for i, row in enumerate(spans[["kind", "round", "node", "token", "peer"]].tolist()):
            kind, rnd, node, token, peer = row
            pid = node if by_node else rank
            if pid not in pids:
                pids[pid] = f"node {pid}" if by_node else f"rank {pid}"
            name = KINDS[kind]
            args = {"round": rnd, "node": node, "token": token}
            if peer >= 0:
                args["peer"] = peer
            if cpu[i] == cpu[i]:  # (measured: $MPI_TELEPORT_TRACE_CPU)
                args["cpu_us"] = round(float(cpu[i]) * 1e6, 3)
            ts = float(starts[i])
            out.append({"name": name, "cat": category(name), "ph": "X", "ts": ts,
                        "dur": max(0.0, round(float(ends[i]) - ts, 3)), "pid": pid, "tid": 0,
                        "args": args})
    # per process by start, the enclosing span first (viewers nest on that order)
    out.sort(key=lambda e: (e["pid"], e["ts"], -e["dur"]))
    meta_events = []
    for pid in sorted(pids):
        meta_events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"name": pids[pid]}})
        meta_events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"sort_index": pid}})
    first = parts[0][0] if parts else {}
    other = {
        "producer": "mpi_teleport",
        "clock": ("virtual: each simulated node's logical clock (microseconds)"
                  if clock == "virtual" else
                  "time.perf_counter of each process, zero where it left a barrier at the start"),
        "offsets_s": offsets,  # each process's zero minus rank 0's (0 on one host)
        "processes": "node" if first.get("pid_from") == "node" else "rank",
        "backend": first.get("backend", ""),
        "rounds_recorded_at_most": first.get("rounds"),
        "every": first.get("every"),
        "first_round": first.get("first"),
        "total_rounds": first.get("total_rounds"),
        "dropped": dropped,
        "started_unix_s": first.get("started"),
    }
    return meta_events + out, other


def write_trace(path: Path, parts: list[tuple[dict, np.ndarray]]) -> None:
    """The trace file of ``parts`` (atomically: a reader sees the old or the new file)."""
    from ..disk.output import write_atomic_with

    evs, other = events(parts)

    def write(f):
        f.write(b'{"displayTimeUnit": "ms", "otherData": ')
        f.write(json.dumps(other).encode())
        f.write(b', "traceEvents": [\n')
        for i, e in enumerate(evs):
            if i:
                f.write(b",\n")
            f.write(json.dumps(e, separators=(",", ":")).encode())
        f.write(b"\n]}\n")

    write_atomic_with(Path(path), write)


def load(path) -> dict:
    """A trace file as written (a dict with ``traceEvents`` and ``otherData``)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)
