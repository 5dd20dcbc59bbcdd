"""A real bandwidth-bound network against the latency layer's ``bw:`` model.

    python benchmarks/bench_tc_bandwidth.py [--quick] [--out benchmarks/results]

Runs on the two-host namespace test bed (jobs/netns-cluster.sh; root; started here if it
is not up): every host's link is limited with ``tc`` (htb, both directions, packets under
128 bytes first; NETNS_SHAPER=tbf: the older token bucket) to RATE Mbit/s, and the
quadratic problem with a large dimension d (messages of 8 d bytes) runs over MPI with
ranks on both hosts, under Open MPI and under MPICH (when ``.venv-mpich`` exists;
tests/launch_helpers.py makes it). Each case runs twice: as a user runs it (the
measured real time, ``time_s``: the compiled rounds, large tokens pipelined), and with
``--latency bw:RATE/1000,hosts:R --clock virtual`` (R ranks per host) for the model's
prediction (``virtual_time_s``): the latency layer's virtual clock adds to the measured
compute time, per message, the time its round's bytes take over the host links it shares
(mpi_teleport/latency/model.py) and delays nothing. That second run goes through the round
executor, every message with a companion clock stamp; its own wall clock is kept as
``layer_s_per_round`` (until 2026-11-27 it was the measured time: the results before then
measured that path).

Per case it reports measured / physical bound, the bound being, round by round, the bytes
that must cross the busiest host link in one direction over the link's rate, summed over
the measured rounds, per round (``bound_s_per_round``, computed from the run's plan:
mpi_teleport.latency.virtual_clock.round_links). ``window_bound_s_per_round`` takes the
busiest link over all the measured rounds at once instead (lower for Teleportation, whose
rounds load the links unevenly); no Teleportation run reaches it, since a round's senders
are the previous round's receivers and need its messages first (runs seemed to beat the
round-by-round bound only while ``time_s`` left out the wire time of a logging round,
before the engine waited for every rank there). For DSGD both are equal. And predicted /
measured. The
load average (1 min) before and after every run is recorded beside it: the machine's two
cores serve every rank of both hosts, and other work.

The model's bandwidth is the link's TCP goodput, ``RATE * TCP_GOODPUT``: ``tc`` counts
whole Ethernet frames (1448 payload bytes in 1514 with TCP timestamps) and, with data
flowing both ways, half an ACK (66 bytes) per frame from the other direction. Plain TCP
on the same bed is measured too (``tcp_s_per_round``: two Python sockets exchanging the
message both ways at once, one connection), for what the wire gives without MPI.

Two more figures say where a round's time goes beyond the bound: the run's **step time**
(``step_s_per_round``: its virtual time less the model's wire time, i.e. the CPU time of the
local steps on the round's critical path; DSGD and Teleportation compute y = x - lr g(x)
before they can send it, so it adds to the wire's time, except the gradient noise, which a
rank draws while it waits for the round before: ``measured_over_bound_plus_step``)
and a **bare MPI exchange** of the same bytes with the same pieces (``bare_mpi_s_per_round``:
mpi4py alone, no mpi_teleport round; for DSGD every rank exchanging with its ring neighbours
back to back, for Teleportation the run's own rounds' messages chained as Algorithm 3 chains
them, :data:`BARE_CHAIN`; ``bare_over_bound`` is what
the MPI library and the bed give, ``measured_over_bare_plus_step`` what the run adds to it).

``--pieces 0,61440``: the transport's piece size per run (MPI_TELEPORT_PIECE_BYTES: 0
sends whole messages, the default 60 KiB keeps every piece under Open MPI's TCP eager
limit). ``--bed/--rsh/--hosts``: another copy of the test bed (default: jobs/).

Configurations: DSGD with 2 ranks (one per host: one message each way per round over
its own link), DSGD with 4 ranks on a ring 0-1-2-3-0 (two per host: two messages share
each host's link, which the model, with independent links, does not know), and
Teleportation with 4 ranks and k = 2 (tokens hop between hosts in some rounds only).

``--plot a.json,b.json:mpich --tag T``: no runs, the rows of earlier results in one figure
and a markdown table (bench_tc_bandwidth_T.png; ``:IMPL`` keeps one implementation's rows;
``--replace``: a case in several files is drawn from the last one, a re-run; ``--pool``:
the files' runs of a case are pooled, its median and range over them all).

``--repeat N``: every case N times, taken in turn (each implementation, configuration and
variant once, then again), one row each; the figure and table show each case's median and
its runs' range. On the bed's 2 cores one run of a case is not a figure: Teleportation at
40 MB and 1000 Mbit/s read x1.13, 1.15 and 1.38 in runs minutes apart.

``--chains --rates R --dims D --tag T``: no mpi_teleport runs; which chained exchanges reach
the bound (plain TCP, MPI on 2 and 4 ranks, Teleportation's rounds bare: :func:`chains`),
bench_tc_bandwidth_chains_T.{csv,json,png}. The bed's shaper, burst and queue follow
NETNS_SHAPER, NETNS_BURST and NETNS_QUEUE (jobs/netns-cluster.sh); the results record them.

``--run-flags '--sigma2 0'``: more flags for every run (there: the quadratic without its
gradient noise, whose draws need CPU the bed's 2 cores lack at 1000 Mbit/s).

``--openmpi-eager``: Open MPI only, with its TCP eager limit raised to 1 MiB (messages up
to 1 MiB go without the rendezvous handshake whose small control messages otherwise queue
behind the other direction's data on a rate-limited link); writes
bench_tc_bandwidth_openmpi_eager.*.

Writes bench_tc_bandwidth{,_quick}.csv (one row per run), .json (settings, machine) and
.png (measured vs predicted seconds per round) into --out.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mpi_teleport.measure import find_mpirun, mpi_env, mpirun_command  # noqa: E402
from mpi_teleport.measure import flavor_of_launcher  # noqa: E402
from mpi_teleport.measure import read_jsonl  # noqa: E402

BED = ["bash", str(ROOT / "jobs" / "netns-cluster.sh")]
AGENT = str(ROOT / "jobs" / "netns-rsh")
HOSTS = ["10.231.77.1", "10.231.77.2"]
CONFIGS = {  # name -> (ranks, flags)
    "dsgd-2": (2, ["--algorithm", "dsgd", "--topology", "ring"]),
    "dsgd-4-ring": (4, ["--algorithm", "dsgd", "--topology", "ring"]),
    "teleportation-4-k2": (4, ["--algorithm", "teleportation", "--k", "2", "--topology", "ring"]),
}


TCP_GOODPUT = 1448 / (1514 + 66 / 2)  # payload bytes per byte on a link loaded both ways
# The two plain-TCP scripts below start with this: argv role (server, client), the server's
# address, the message's bytes, a count; connect(port) is one TCP_NODELAY connection.
_TCP_CONNECT = r"""
import socket, sys, threading, time
role, addr, nbytes, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def connect(port):
    if role == "server":
        ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port)); ls.listen(1); s = ls.accept()[0]
    else:
        for _ in range(200):
            try:
                s = socket.create_connection((addr, port)); break
            except OSError:
                time.sleep(0.05)
        else:
            raise SystemExit(f"client: cannot connect to {addr}:{port}")
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s
"""
TCP_EXCHANGE = _TCP_CONNECT + r"""
rounds, connections = count, int(sys.argv[5]) if len(sys.argv) > 5 else 1
s = connect(47777)
# two connections: each carries one direction (the client sends on the first), as two
# pairs of MPI ranks crossing would
other = connect(47779) if connections == 2 else s
send_on, recv_on = (s, other) if role == "client" else (other, s)
out, inb = bytearray(nbytes), bytearray(nbytes)
def fill():
    v, got = memoryview(inb), 0
    while got < nbytes:
        got += recv_on.recv_into(v[got:])
times = []
for r in range(rounds):
    t0 = time.perf_counter()
    th = threading.Thread(target=fill); th.start(); send_on.sendall(out); th.join()
    times.append(time.perf_counter() - t0)
    s.sendall(b"x"); s.recv(1)
if role == "client":
    print(sum(times[2:]) / len(times[2:]))
"""


# Plain TCP in a chain: the message crosses host 0 -> host 1, then back, each hop starting
# when the previous one has been received whole (Teleportation's rounds chain so: a round's
# senders are the previous round's receivers), one direction of the link busy at a time.
# The client times hops 4 .. HOPS - 1 (from the end of a receive to the end of a receive).
TCP_CHAIN = _TCP_CONNECT + r"""
hops, s = count, connect(47778)
buf = bytearray(nbytes); view = memoryview(buf)
mine = 0 if role == "client" else 1
for h in range(hops):
    if h % 2 == mine:
        s.sendall(buf)
    else:
        got = 0
        while got < nbytes:
            got += s.recv_into(view[got:])
        if role == "client" and h == 3:
            t0 = time.perf_counter()
if role == "client":
    print((time.perf_counter() - t0) / (hops - 4))
"""


def _tcp_pair(script: str, nbytes: int, count: int, *extra: str, timeout: float = 300) -> float:
    """``script`` (a plain-TCP script: :data:`_TCP_CONNECT`'s arguments, then ``extra``) as
    the server on the bed's second host and the client on the first; the client's number."""
    args = [HOSTS[1], str(nbytes), str(count), *extra]
    server = subprocess.Popen([*BED, "exec", HOSTS[1], sys.executable, "-c", script, "server", *args],
                              stdout=subprocess.DEVNULL)
    try:
        client = subprocess.run([*BED, "exec", HOSTS[0], sys.executable, "-c", script, "client", *args],
                                capture_output=True, text=True, timeout=timeout, check=True)
    finally:
        server.wait(timeout=60)
    return float(client.stdout.strip())


# Teleportation's rounds over plain TCP (no MPI): process RANK of N (PER_HOST a host) keeps
# one connection to every other, and per round starts a thread per message of its own
# (receive, or sendall of NBYTES) and joins them (Algorithm 3's chain, as BARE_CHAIN
# without MPI). Every message is stamped on the monotonic clock, which the bed's hosts
# share (one kernel): ("send", round, src, dst, called, returned) and ("recv", round, src,
# dst, first byte, last byte). Rank 0 prints the seconds per round of rounds WARM..; every
# rank prints "EV" and its stamps as JSON. Each listens on a port the system gives it and
# says which in PORTS/port-RANK (a folder every process sees: the bed's hosts share the
# file system), so no fixed port can be taken by another job.
TCP_ROUNDS = r"""
import json, os, socket, struct, sys, threading, time
rank, n, per_host, nbytes, warm = (int(a) for a in sys.argv[1:6])
plan, hosts, ports = json.loads(sys.argv[6]), sys.argv[7].split(","), sys.argv[8]
addr = lambda r: hosts[r // per_host]
conns, stamps = {}, []
ls = socket.socket(); ls.bind((addr(rank), 0)); ls.listen(n)
with open(os.path.join(ports, f".port-{rank}"), "w") as f:
    f.write(str(ls.getsockname()[1]))
os.replace(os.path.join(ports, f".port-{rank}"), os.path.join(ports, f"port-{rank}"))
def port(p):
    for _ in range(1200):
        try:
            with open(os.path.join(ports, f"port-{p}")) as f:
                return int(f.read())
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"rank {rank}: rank {p} never said which port it listens on")
for p in range(rank):  # connect to the lower ranks, accept the higher
    for _ in range(400):
        try:
            s = socket.create_connection((addr(p), port(p))); break
        except OSError:
            time.sleep(0.05)
    else:
        raise SystemExit(f"rank {rank}: cannot connect to rank {p} at {addr(p)}:{port(p)}")
    s.sendall(struct.pack("i", rank)); conns[p] = s
for _ in range(n - 1 - rank):
    s = ls.accept()[0]; conns[struct.unpack("i", s.recv(4, socket.MSG_WAITALL))[0]] = s
for s in conns.values():
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out, ins = bytearray(nbytes), {p: bytearray(nbytes) for p in conns}
def recv(t, p):
    view, got, first = memoryview(ins[p]), 0, None
    while got < nbytes:
        got += conns[p].recv_into(view[got:])
        first = first or time.monotonic()
    stamps.append(("recv", t, p, rank, first, time.monotonic()))
def send(t, d):
    called = time.monotonic(); conns[d].sendall(out)
    stamps.append(("send", t, rank, d, called, time.monotonic()))
def barrier():
    if rank == 0:
        for p in conns: conns[p].recv(1, socket.MSG_WAITALL)
        for p in conns: conns[p].sendall(b"b")
    else:
        conns[0].sendall(b"b"); conns[0].recv(1, socket.MSG_WAITALL)
def one(t):
    threads = [threading.Thread(target=recv, args=(t, s)) for s, d in plan[t] if d == rank]
    threads += [threading.Thread(target=send, args=(t, d)) for s, d in plan[t] if s == rank]
    for th in threads: th.start()
    for th in threads: th.join()
for t in range(warm):
    one(t)
barrier(); t0 = time.perf_counter()
for t in range(warm, len(plan)):
    one(t)
barrier()
if rank == 0:
    print((time.perf_counter() - t0) / (len(plan) - warm))
print("EV", json.dumps(stamps))
"""


def tcp_rounds(plan: list, nbytes: int, warm: int, ranks: int = 4) -> tuple[float, list]:
    """:data:`TCP_ROUNDS` of ``plan`` on the bed (``ranks`` processes spread evenly over its
    hosts): seconds per round of rounds warm.., and every process's stamps."""
    per_host = ranks // len(HOSTS)
    with tempfile.TemporaryDirectory(prefix="tcp-rounds-ports-") as ports:
        procs = [subprocess.Popen([*BED, "exec", HOSTS[r // per_host], sys.executable, "-c",
                                   TCP_ROUNDS, str(r), str(ranks), str(per_host), str(nbytes),
                                   str(warm), json.dumps(plan), ",".join(HOSTS), ports],
                                  stdout=subprocess.PIPE, text=True)
                 for r in range(ranks)]
        outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"plain-TCP rounds failed: statuses {[p.returncode for p in procs]}")
    stamps = [s for o in outs for line in o.splitlines() if line.startswith("EV ") for s in json.loads(line[3:])]
    return float(outs[0].splitlines()[0]), stamps


def tcp_chain_s_per_hop(nbytes: int, hops: int = 12) -> float:
    """Plain TCP, :data:`TCP_CHAIN`: seconds per hop of NBYTES, each hop waiting for the
    previous one (hops 4 .. HOPS - 1; HOPS even)."""
    return _tcp_pair(TCP_CHAIN, nbytes, hops, timeout=600)


def tcp_s_per_round(nbytes: int, rounds: int = 8, connections: int = 1) -> float:
    """Plain TCP between the two hosts: NBYTES each way at once, seconds per round (mean of
    rounds 2..), both directions on one connection or (``connections=2``) one a direction."""
    return _tcp_pair(TCP_EXCHANGE, nbytes, rounds, str(connections))


# The same bytes with bare mpi4py: every rank exchanges NBYTES with its ring neighbours at
# once (one peer with 2 ranks), cut like the transport cuts them (pieces of PIECE to peers
# on another host), ROUNDS times back to back: what the MPI library and the bed give
# without any of mpi_teleport's round (no step, no schedule, no records).
BARE_EXCHANGE = r"""
import sys, time, numpy as np
from mpi4py import MPI
from mpi_teleport.measure import pieces
comm = MPI.COMM_WORLD; r, n = comm.rank, comm.size
nbytes, piece, per_host, rounds = (int(a) for a in sys.argv[1:5])
peers = sorted({(r - 1) % n, (r + 1) % n} - {r})
out = np.ones(nbytes // 8); ins = {p: np.empty_like(out) for p in peers}
cut = lambda p, buf: pieces(buf, piece) if p // per_host != r // per_host else [buf]
def once():
    reqs = [comm.Irecv(v, p, 0) for p in peers for v in cut(p, ins[p])]
    reqs += [comm.Isend(v, p, 0) for p in peers for v in cut(p, out)]
    MPI.Request.Waitall(reqs)
for _ in range(3):
    once()
comm.Barrier(); t0 = time.perf_counter()
for _ in range(rounds):
    once()
comm.Barrier()
if r == 0:
    print((time.perf_counter() - t0) / rounds)
"""


# Teleportation's messages with bare mpi4py: round by round, every rank posts the receives of
# the messages addressed to it and the sends of its own (a round's senders are the previous
# round's receivers, whose wait they have passed: Algorithm 3's chain), then waits for them
# all; no step, no sum, no schedule computed (the rounds' pairs come from the run's plan,
# ``round_pairs``), cut into the transport's pieces between hosts. Rounds 0 .. WARM - 1 warm
# up; the rest are timed between two barriers.
BARE_CHAIN = r"""
import json, sys, time, numpy as np
from mpi4py import MPI
from mpi_teleport.measure import pieces
comm = MPI.COMM_WORLD; r, n = comm.rank, comm.size
nbytes, piece, per_host, warm = (int(a) for a in sys.argv[1:5])
plan = json.loads(sys.argv[5])
out = np.ones(nbytes // 8); ins = {p: np.empty_like(out) for p in range(n)}
cut = lambda p, buf: pieces(buf, piece) if p // per_host != r // per_host else [buf]
def one(t, pairs):
    reqs = [comm.Irecv(v, s, t) for s, d in pairs if d == r for v in cut(s, ins[s])]
    reqs += [comm.Isend(v, d, t) for s, d in pairs if s == r for v in cut(d, out)]
    MPI.Request.Waitall(reqs)
for t in range(warm):
    one(t, plan[t])
comm.Barrier(); t0 = time.perf_counter()
for t in range(warm, len(plan)):
    one(t, plan[t])
comm.Barrier()
if r == 0:
    print((time.perf_counter() - t0) / (len(plan) - warm))
"""


def _bare_chain(python: str, ranks: int, nbytes: int, plan: list, warm: int,
                piece_bytes: int | None = None) -> float | None:
    """Seconds per round of :data:`BARE_CHAIN` for ``plan`` (a list of rounds of [sender,
    receiver] pairs; rounds 0 .. warm - 1 warm up; None: not measured)."""
    from mpi_teleport.measure import PIECE_BYTES

    piece = PIECE_BYTES if piece_bytes is None else piece_bytes
    try:
        proc = launch_on_bed(python, ranks, ["-c", BARE_CHAIN, str(nbytes), str(piece),
                                             str(max(1, ranks // len(HOSTS))), str(warm), json.dumps(plan)],
                             timeout=600)
    except RuntimeError as exc:
        print(f"bench_tc_bandwidth: bare chain failed: {exc}", file=sys.stderr)
        return None
    return float(proc.stdout.strip().splitlines()[-1])


def bare_chain_s_per_round(python: str, config: str, ranks: int, dim: int,
                           piece_bytes: int | None, first: int, last: int) -> float | None:
    """Seconds per round of :data:`BARE_CHAIN` over the run's rounds first .. last - 1
    (rounds 0 .. first - 1 warm up; None: not measured)."""
    return _bare_chain(python, ranks, 8 * dim, round_pairs(config, ranks, dim, 0, last), first,
                       piece_bytes)


def bare_s_per_round(python: str, config: str, ranks: int, dim: int, piece_bytes: int | None,
                     first: int, last: int) -> float | None:
    """The case's bare MPI exchange, seconds per round: DSGD's ring exchange back to back
    (:data:`BARE_EXCHANGE`), Teleportation's own rounds chained (:data:`BARE_CHAIN`, rounds
    first .. last - 1: its pattern changes every round)."""
    if config.startswith("dsgd"):
        return bare_mpi_s_per_round(python, ranks, 8 * dim, piece_bytes)
    return bare_chain_s_per_round(python, config, ranks, dim, piece_bytes, first, last)


def tc_setting() -> str:
    """The bed's shaping of every host link (jobs/netns-cluster.sh rate, with this
    process's NETNS_SHAPER, NETNS_BURST and NETNS_QUEUE, which the script reads)."""
    burst, queue = os.environ.get("NETNS_BURST", "64kb"), os.environ.get("NETNS_QUEUE", "200ms")
    if os.environ.get("NETNS_SHAPER", "htb") == "tbf":
        return f"tbf rate RATE burst {burst} latency {queue} on both ends of every host's veth"
    return (f"htb rate RATE burst {burst}, a {queue} byte FIFO, packets under 128 bytes first, "
            "on both ends of every host's veth")


def write_rows(out: Path, stem: str, rows: list[dict], about: dict) -> None:
    """``rows`` as STEM.csv (every key of any row a column) and STEM.json (``about`` and
    the rows), in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)), restval="")
        writer.writeheader()
        writer.writerows(rows)
    (out / f"{stem}.json").write_text(json.dumps({**about, "rows": rows}, indent=1))


def chains(rates: list[float], dims: list[int], out: Path, tag: str) -> int:
    """``--chains``: which chained exchanges reach the bound, per rate and size. Plain TCP
    (:data:`TCP_CHAIN`: one message back and forth, each hop after the previous; and, for
    comparison, both ways at once on one connection or on two, one a direction), MPI on 2
    ranks (one a host) doing the same, MPI on 4 ranks (two a host) passing one message
    around 0 -> 2 -> 1 -> 3 (every hop crosses, two ranks idle each hop), and Teleportation's
    rounds (k = 2 over 4 ranks) over plain TCP (:data:`TCP_ROUNDS`) and in MPI
    (:data:`BARE_CHAIN` of the run's plan) with and without their messages within a host.
    Each over its bound: a hop's bytes / rate, or the rounds' round-by-round bound."""
    rows = []
    stem = "bench_tc_bandwidth_chains" + (f"_{tag}" if tag else "")
    config, first, last = "teleportation-4-k2", 5, 20
    try:
        for mbit in rates:
            set_rate(mbit)
            for dim in dims:
                nbytes = 8 * dim
                hop = wire_s(nbytes, mbit)
                hops = 12 if nbytes < 20e6 else 8
                row = {"rate_mbit": mbit, "message_bytes": nbytes,
                       "tcp_chain_over_bound": tcp_chain_s_per_hop(nbytes, hops) / hop}
                for connections in (1, 2):  # both ways at once (the bound: one message's time)
                    row[f"tcp_both_ways_{connections}_connection{'s' * (connections - 1)}_over_bound"] = (
                        tcp_s_per_round(nbytes, hops, connections) / hop)
                ping = [[[0, 1]] if h % 2 == 0 else [[1, 0]] for h in range(hops)]
                around = [[[r, s]] for r, s in zip([0, 2, 1, 3] * hops, [2, 1, 3, 0] * hops)][:hops]
                plan = round_pairs(config, 4, dim, 0, last)
                cross = [[p for p in one if p[0] // 2 != p[1] // 2] for one in plan]
                bound = physical_bound_s(config, 4, dim, mbit, first, last)
                row["tcp_teleportation_rounds_over_bound"] = tcp_rounds(plan, nbytes, first)[0] / bound
                for name, python in implementations():
                    for key, ranks, pl, warm, per in (
                            ("mpi_2_ranks_chain", 2, ping, 4, hop), ("mpi_4_ranks_one_message", 4, around, 4, hop),
                            ("teleportation_chain", 4, plan, first, bound),
                            ("teleportation_chain_cross_host_only", 4, cross, first, bound)):
                        got = _bare_chain(python, ranks, nbytes, pl, warm)
                        row[f"{name}_{key}_over_bound"] = None if got is None else got / per
                rows.append(row)
                print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      flush=True)
                write_rows(out, stem, rows, {"what": chains.__doc__, "tc": tc_setting()})
    finally:
        set_rate(None)
    plot_chains(rows, out / f"{stem}.png")
    print(f"bench_tc_bandwidth: wrote {out / stem}.{{csv,json,png}}")
    return 0


def plot_chains(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in rows[0] if k.endswith("_over_bound")]
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(rows) + 3), 5))
    width = 0.85 / len(keys)
    for i, key in enumerate(keys):
        ax.bar([c + i * width for c in range(len(rows))], [r[key] or 0 for r in rows], width,
               label=key.removesuffix("_over_bound").replace("_", " "))
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.axhline(1.15, color="k", linestyle="--", linewidth=0.8)
    ax.set_xticks([c + 0.425 - width / 2 for c in range(len(rows))])
    ax.set_xticklabels([f"{r['message_bytes'] / 1e6:g} MB, {r['rate_mbit']:g} Mbit/s" for r in rows], fontsize=8)
    ax.set_ylabel("time / physical bound")
    ax.set_title("chained exchanges on the tc bed: which reach the wire's bound")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def launch_on_bed(python: str, ranks: int, argv: list[str], timeout: float,
                  piece_bytes: int | None = None) -> subprocess.CompletedProcess:
    """``python ARGV`` on ``ranks`` ranks spread evenly over the bed's hosts, under the MPI
    of ``python``, started from the first host. Open MPI gets ``--bind-to none``: it binds
    each host's first rank to core 0, and the bed's hosts share this machine's cores, so
    every host's rank 0 would share one core (``--report-bindings``: both "bound to
    package[0][core:L0]"; 2 MB each way at 1000 Mbit/s 37 ms bound, 23-29 ms not). On real
    hosts binding is right. And it yields when idle (``mpi_yield_when_idle 1``): each host
    shows it 2 cores, but the bed's 4 ranks share 2, and four busy-polling ranks kept the
    active ones off the cores (Teleportation's rounds bare, 0.5 MB at 1000 Mbit/s: x1.26-1.58
    the bound polling, x1.02-1.06 yielding; benchmarks/results/wire-tc-bandwidth-2026-11-27.md, "The bed's link"). On a cluster
    with a core per rank polling is right."""
    mpirun = find_mpirun(python)
    flavor = flavor_of_launcher(mpirun)
    env = mpi_env(flavor=flavor)
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.setdefault("UCX_TLS", "tcp,self")  # MPICH's UCX would use shared memory between the hosts
    if piece_bytes is not None:
        env["MPI_TELEPORT_PIECE_BYTES"] = str(piece_bytes)
    per_host = ranks // len(HOSTS)
    cmd = mpirun_command(ranks, [python, *argv], mpirun, flavor,
                         hosts=",".join(f"{h}:{per_host}" for h in HOSTS), rsh_agent=AGENT, env=env)
    if flavor.name == "openmpi":
        cmd[1:1] = ["--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]
    # (a trace's CPU times, bench_tc_trace --run: to the other host's ranks too)
    cmd[1:1] = flavor.export_env_flags([n for n in ("MPI_TELEPORT_TRACE_CPU",) if n in env])
    proc = subprocess.run([*BED, "exec", HOSTS[0], *cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        error = LostDaemon if proc.returncode == LOST_DAEMON else RuntimeError
        raise error(f"{' '.join(cmd[:3])}...: status {proc.returncode}: {proc.stderr[-1500:]}")
    return proc


# Open MPI's launcher on the bed now and then loses its daemon on the second host at the
# start (prterun's status 213, "lost communication with a remote daemon"): the run is
# started once more (as tests/test_multihost.start_running does).
LOST_DAEMON = 213


class LostDaemon(RuntimeError):
    """The launcher lost a remote daemon (status 213)."""


def bare_mpi_s_per_round(python: str, ranks: int, nbytes: int, piece_bytes: int | None,
                         rounds: int = 20) -> float | None:
    """Seconds per exchange of :data:`BARE_EXCHANGE` on the bed (None: not measured)."""
    from mpi_teleport.measure import PIECE_BYTES

    piece = PIECE_BYTES if piece_bytes is None else piece_bytes
    try:
        proc = launch_on_bed(python, ranks, ["-c", BARE_EXCHANGE, str(nbytes), str(piece),
                                             str(ranks // len(HOSTS)), str(rounds)], timeout=600)
    except RuntimeError as exc:
        print(f"bench_tc_bandwidth: bare exchange failed: {exc}", file=sys.stderr)
        return None
    return float(proc.stdout.strip().splitlines()[-1])


EAGER_1MIB = {"OMPI_MCA_btl_tcp_eager_limit": "1048576", "OMPI_MCA_btl_tcp_rndv_eager_limit": "1048576",
              "OMPI_MCA_btl_tcp_max_send_size": "1048576"}


def config_spec(config: str, ranks: int, dim: int):
    """The RunSpec of the configuration's run (its flags in CONFIGS) on ``ranks`` ranks
    with tokens of ``dim`` elements."""
    from mpi_teleport.measure import run_spec
    from mpi_teleport.measure import resolve

    flags = CONFIGS[config][1]
    raw = {flags[i].lstrip("-").replace("-", "_"): flags[i + 1] for i in range(0, len(flags), 2)}
    raw.update(nodes=ranks, dim=dim)
    if "k" in raw:
        raw["k"] = int(raw["k"])
    cfg = resolve(raw)
    return run_spec(cfg, raw["algorithm"], ranks if raw["algorithm"] == "dsgd" else cfg.k)


def _round_plans(config: str, ranks: int, dim: int, first: int, last: int):
    """(round plan, spec) of rounds first .. last - 1 of the configuration's run
    (mpi_teleport.latency.virtual_clock.round_plan: the messages the ranks post)."""
    from mpi_teleport.measure import round_plan

    spec = config_spec(config, ranks, dim)
    for phase in spec.phases():
        for t in range(max(first, phase.start), min(last, phase.stop)):
            yield round_plan(phase, t, spec.topology, spec.moves, spec.momentum > 0), spec


def host_link_loads(config: str, ranks: int, dim: int, first: int, last: int):
    """The bytes each communication phase of rounds first .. last - 1 puts on the host links
    (:class:`mpi_teleport.latency.model.HostLinks`, one per phase), from the run's own plan
    (mpi_teleport.latency.virtual_clock.round_links)."""
    from mpi_teleport.measure import parse_spec
    from mpi_teleport.measure import round_links

    model = parse_spec(f"bw:1,hosts:{ranks // len(HOSTS)}", ranks)  # (the rate does not enter the bytes)
    for msgs, spec in _round_plans(config, ranks, dim, first, last):
        links = round_links(model, msgs, spec.moves, spec.momentum > 0, 8 * dim, ranks)
        yield from {id(v): v for v in links.values()}.values()


def round_pairs(config: str, ranks: int, dim: int, first: int, last: int) -> list[list[list[int]]]:
    """Every round's messages (sender, receiver) between distinct ranks, rounds first ..
    last - 1 of an Algorithm 3 run (one communication phase a round)."""
    rounds = []
    for msgs, _ in _round_plans(config, ranks, dim, first, last):
        pairs = [(s, r) for senders, receivers in msgs.groups for s, r in zip(senders, receivers)]
        pairs += [(s, r) for senders, receivers in msgs.complete for s in senders for r in receivers]
        rounds.append(sorted({(int(s), int(r)) for s, r in pairs if s != r}))
    return [[list(p) for p in one] for one in rounds]


def wire_s(nbytes: float, mbit: float) -> float:
    """Seconds that NBYTES take over a link of MBIT Mbit/s: the bound's unit (one message
    alone: a message time)."""
    return nbytes * 8 / (mbit * 1e6)


def physical_bound_s(config: str, ranks: int, dim: int, mbit: float, first: int, last: int) -> float:
    """Seconds per round that the busiest host link needs for the round's bytes, averaged
    over rounds first .. last - 1 (each communication phase's busiest link, in turn)."""
    total = sum(max(one.out_bytes.max(), one.in_bytes.max())
                for one in host_link_loads(config, ranks, dim, first, last))
    return wire_s(total, mbit) / (last - first)


def window_bound_s(config: str, ranks: int, dim: int, mbit: float, first: int, last: int) -> float:
    """The physical bound over the whole window of rounds first .. last - 1, per round: the
    bytes that cross the busiest host link in one direction over the whole window, over its
    rate, divided by the rounds. Algorithm 3 overlaps a round's hops with the previous
    round's gossip, so a link idle in one round can carry the next round's bytes: no run can
    beat this bound, while it can beat :func:`physical_bound_s` (a round at a time) where
    the rounds load the links unevenly (Teleportation). For DSGD the two are equal."""
    out = into = 0
    for one in host_link_loads(config, ranks, dim, first, last):
        out, into = out + one.out_bytes, into + one.in_bytes
    return wire_s(max(out.max(), into.max()), mbit) / (last - first)


def implementations(openmpi_eager: bool = False) -> list[tuple[str, str]]:
    """(name, python) of each MPI environment here."""
    found = [("openmpi", sys.executable)]
    if openmpi_eager:
        os.environ.update(EAGER_1MIB)  # prterun hands OMPI_MCA_* on to every host
        return found
    mpich = ROOT / ".venv-mpich" / "bin" / "python"
    if mpich.exists():
        found.append(("mpich", str(mpich)))
    return found


def use_bed(script: str, rsh: str, hosts: str) -> None:
    """Another copy of the test bed (its script, remote shell and host addresses)."""
    global AGENT, HOSTS
    BED[1], AGENT, HOSTS = script, rsh, hosts.split(",")


def bed_up() -> bool:
    """The test bed, started if needed; False where it cannot be."""
    if subprocess.run([*BED, "status"], capture_output=True).returncode == 0:
        return True
    proc = subprocess.run([*BED, "start", "2"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"bench_tc_bandwidth: no test bed: {proc.stderr.strip()}", file=sys.stderr)
    return proc.returncode == 0


def set_rate(mbit: float | None) -> None:
    subprocess.run([*BED, "rate", f"{mbit}mbit" if mbit else "off"], check=True, capture_output=True)


@contextlib.contextmanager
def pipeline_env(block: int | None):
    """MPI_TELEPORT_PIPELINE_BYTES=block for the runs started inside (None: as it is)."""
    before = os.environ.get("MPI_TELEPORT_PIPELINE_BYTES")
    if block is not None:
        os.environ["MPI_TELEPORT_PIPELINE_BYTES"] = str(block)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MPI_TELEPORT_PIPELINE_BYTES", None)
        else:
            os.environ["MPI_TELEPORT_PIPELINE_BYTES"] = before


def one_run(python: str, ranks: int, flags: list[str], dim: int, rounds: int, mbit: float,
            timeout: float, piece_bytes: int | None = None) -> dict:
    """Measured and predicted seconds per round (mean over rounds T/4..T: round 0 and the
    first logged interval include start-up, so the first interval is left out), from two
    runs of the same case: the measured one as a user runs it (the compiled rounds,
    pipelined), the predicted one under the latency layer's virtual clock (the round
    executor, its messages stamped with the sender's clock: ``layer_s_per_round`` is that
    run's own wall clock)."""
    per_host = ranks // len(HOSTS)
    base = ["-m", "mpi_teleport.run", *flags, "--nodes", str(ranks), "--dim", str(dim),
            "--rounds", str(rounds), "--log-every", str(rounds // 4), "--progress", "off"]
    clock = ["--latency", f"bw:{mbit * TCP_GOODPUT / 1000:.6g},hosts:{per_host}",
             "--clock", "virtual"]
    load_before = os.getloadavg()[0]
    plain, wall = _records(python, ranks, base, timeout, piece_bytes)
    clocked, _ = _records(python, ranks, [*base, *clock], timeout, piece_bytes)
    first, last = plain[1], plain[-1]  # rounds T/4 .. T
    span = last["round"] - first["round"]
    layer_first, layer_last = clocked[1], clocked[-1]
    return {"measured_s_per_round": (last["time_s"] - first["time_s"]) / span,
            "predicted_s_per_round": (layer_last["virtual_time_s"] - layer_first["virtual_time_s"]) / span,
            "layer_s_per_round": (layer_last["time_s"] - layer_first["time_s"]) / span,
            "measured_path": "compiled rounds (no latency layer)",
            "first_round": first["round"], "last_round": last["round"],
            "launch_wall_s": round(wall, 2), "implementation": flavor_of_launcher(find_mpirun(python)).name,
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def _records(python: str, ranks: int, argv: list[str], timeout: float,
             piece_bytes: int | None) -> tuple[list[dict], float]:
    """The records of one run of ``python ARGV --out TMP`` on the bed, and its wall time
    (started again once when the launcher loses a remote daemon)."""
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory(prefix="bench-tc-") as tmp:
            start = time.monotonic()
            try:
                launch_on_bed(python, ranks, [*argv, "--out", tmp], timeout, piece_bytes)
            except LostDaemon as exc:
                if attempt == 2:
                    raise
                print(f"  (again: {exc})", flush=True)
                continue
            return read_jsonl(Path(tmp) / "metrics.jsonl"), time.monotonic() - start
    raise AssertionError("unreachable")


def with_ratios(row: dict) -> dict:
    """The row with its ratios computed from its seconds (so that files written before a
    ratio's definition changed are drawn by today's): measured / bound (round by round),
    / window bound, / (bound + step), predicted / measured and the bare exchange's."""
    measured, predicted, bound = (row["measured_s_per_round"], row["predicted_s_per_round"],
                                  row["bound_s_per_round"])
    # the run's own step time: its prediction less the model's wire time (the
    # round-by-round bound's arithmetic at the goodput rate)
    step = max(0.0, predicted - bound / TCP_GOODPUT)
    nbytes, mbit = row["message_bytes"], row["rate_mbit"]
    out = dict(row, tcp_over_its_bound=row["tcp_s_per_round"] / wire_s(nbytes, mbit),
               measured_over_bound=measured / bound,
               measured_over_window_bound=measured / row["window_bound_s_per_round"],
               step_s_per_round=step, measured_over_bound_plus_step=measured / (bound + step),
               predicted_over_measured=predicted / measured,
               measured_over_predicted=measured / predicted)
    if row.get("bare_mpi_s_per_round") is not None:
        bare = row["bare_mpi_s_per_round"]
        out.update(bare_over_bound=bare / bound, measured_over_bare_plus_step=measured / (bare + step))
    return out


# the ratios a case's repeated runs are summed up by (their median, and their range)
RATIOS = ("measured_over_bound", "measured_over_bound_plus_step", "bare_over_bound",
          "predicted_over_measured", "tcp_over_its_bound")


def repeats_merged(rows: list[dict]) -> list[dict]:
    """A row per case (implementation, configuration, size, rate): a case run once is its
    row; a case run several times (``--repeat``) is its first run's row with each of
    :data:`RATIOS` the median over the runs, its range in ``RATIO_range`` (min, max) and the
    number of runs in ``runs``. The runs of one case vary on the bed's 2 cores (x1.13-1.38
    for the same case minutes apart): the median is the figure, the range is drawn."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["implementation"], r["config"], r["message_bytes"], r["rate_mbit"]), []).append(r)
    merged = []
    for runs in groups.values():
        if len(runs) == 1:
            merged.append(runs[0])
            continue
        row = dict(runs[0], runs=len(runs))
        for key in RATIOS:
            values = [r[key] for r in runs if isinstance(r.get(key), float)]
            if values:
                row[key] = statistics.median(values)
                row[f"{key}_range"] = (min(values), max(values))
        merged.append(row)
    return merged


def plot(rows: list[dict], path: Path) -> None:
    """Per case: measured / physical bound (top) and predicted / measured (bottom); a case
    run several times is drawn at its median, with its runs' range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = repeats_merged(rows)
    impls = list(dict.fromkeys(r["implementation"] for r in rows))
    cases = list(dict.fromkeys((r["config"], r["message_bytes"], r["rate_mbit"]) for r in rows))
    fig, axes = plt.subplots(2, 1, figsize=(max(9, 0.7 * len(cases) + 3), 9), sharex=True)
    width = 0.8 / len(impls)
    for ax, key, title, line in ((axes[0], "measured_over_bound", "measured / physical bound", 1.15),
                                 (axes[1], "predicted_over_measured", "predicted (bw:,hosts:) / measured", None)):
        for i, impl in enumerate(impls):
            got = {(r["config"], r["message_bytes"], r["rate_mbit"]): r[key] for r in rows
                   if r["implementation"] == impl}
            xs = [c + i * width for c, case in enumerate(cases) if case in got]
            ax.bar(xs, [got[case] for case in cases if case in got], width, label=impl)
            spread = {(r["config"], r["message_bytes"], r["rate_mbit"]): r[f"{key}_range"] for r in rows
                      if r["implementation"] == impl and f"{key}_range" in r}
            if spread:  # the runs' range of a repeated case
                at = [(c + i * width, got[case], spread[case]) for c, case in enumerate(cases) if case in spread]
                ax.errorbar([x for x, _, _ in at], [y for _, y, _ in at],
                            yerr=[[y - lo for _, y, (lo, _) in at], [hi - y for _, y, (_, hi) in at]],
                            fmt="none", ecolor="k", elinewidth=0.8, capsize=2)
            if line:  # measured / (bound + the run's step time): y is computed before it is sent
                plus = {(r["config"], r["message_bytes"], r["rate_mbit"]): r.get("measured_over_bound_plus_step")
                        for r in rows if r["implementation"] == impl}
                ax.plot(xs, [plus[case] for case in cases if case in got], "o", color=f"C{i}", mec="k",
                        markersize=4, label=f"{impl}: measured / (bound + step)")
        if line:
            ax.axhline(line, color="k", linestyle="--", linewidth=0.8)
            tcp = {(r["config"], r["message_bytes"], r["rate_mbit"]): r["tcp_over_its_bound"] for r in rows
                   if "tcp_over_its_bound" in r}
            ax.plot([c + 0.4 - width / 2 for c, case in enumerate(cases) if case in tcp],
                    [tcp[case] for case in cases if case in tcp], "k_", markersize=14, mew=2,
                    label="plain TCP, one message each way")
        else:
            ax.axhspan(0.9, 1.1, color="k", alpha=0.08)
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_title(title)
        ax.set_xticks([c + 0.4 - width / 2 for c in range(len(cases))])
        ax.set_xticklabels([f"{c}\n{b / 1e6:g} MB, {m:g} Mbit/s" for c, b, m in cases], rotation=70,
                           fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("tc-limited links between two namespace hosts (2 cores for all ranks)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def save(rows: list[dict], args, rates, dims, configs) -> tuple[Path, str]:
    """The rows so far as CSV and JSON (after every run: a sweep cut short keeps them)."""
    out = Path(args.out)
    stem = ("bench_tc_bandwidth" + ("_quick" if args.quick else "") + ("_openmpi_eager" if args.openmpi_eager else "")
            + (f"_{args.tag}" if args.tag else ""))
    write_rows(out, stem, rows, {
        "what": "seconds per round over tc-limited links (2 namespace hosts) vs the physical bound "
                "(busiest host link's bytes / rate) and the latency layer's bw:RATE,hosts:R model "
                "(virtual clock: measured compute + shared host links)",
        "rounds": args.rounds, "rates_mbit": rates, "model_bw_over_rate": TCP_GOODPUT,
        "openmpi_env": EAGER_1MIB if args.openmpi_eager else {}, "dims": dims, "configs": {k: v[1] for k, v in configs.items()},
        "tc": tc_setting(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_at_end": os.getloadavg()}})
    return out, stem


def plot_results(paths: list[str], out: Path, tag: str, replace: bool = False, pool: bool = False) -> int:
    """One figure (and a markdown table) of several results files' rows; where two files
    hold the same case under the same implementation, each is told apart by its file's tag
    (its name after bench_tc_bandwidth_), or, with ``replace``, the last file's row is
    kept, or, with ``pool``, the files' rows are runs of one case (more ``--repeat`` runs
    of it, made later: the median and range of them all)."""
    loaded = []
    for spec in paths:  # PATH or PATH:IMPL+IMPL (only those implementations' rows)
        path, _, only = spec.partition(":")
        rows = json.loads(Path(path).read_text())["rows"]
        keep = set(only.split("+")) if only else None
        loaded.append((Path(path), [r for r in rows if keep is None or r["implementation"] in keep]))
    if replace:
        case = lambda r: (r["implementation"], r["config"], r["message_bytes"], r["rate_mbit"])  # noqa: E731
        later = [{case(r) for r in rows} for _, rows in loaded]
        loaded = [(path, [r for r in rows if not any(case(r) in after for after in later[i + 1:])])
                  for i, (path, rows) in enumerate(loaded)]
    files: dict[tuple, int] = {}
    for _, rows in loaded:
        for key in {(r["implementation"], r["config"], r["message_bytes"], r["rate_mbit"]) for r in rows}:
            files[key] = files.get(key, 0) + 1
    twice = set() if pool else {key[0] for key, count in files.items() if count > 1}
    merged = []
    for path, rows in loaded:
        label = path.stem.removeprefix("bench_tc_bandwidth").lstrip("_") or "untagged"
        for r in rows:
            # a run with more flags (--run-flags: another problem) is another case
            merged.append(dict(with_ratios(r), implementation=r["implementation"] + (
                f" {r['run_flags']}" if r.get("run_flags") else "") + (
                f" ({label})" if r["implementation"] in twice else "")))
    if replace:  # (each size and rate where it first came, the configurations in turn)
        first = {key: i for i, key in reversed(list(enumerate((r["message_bytes"], r["rate_mbit"])
                                                                 for r in merged)))}
        order = {c: i for i, c in enumerate(CONFIGS)}
        merged.sort(key=lambda r: (first[(r["message_bytes"], r["rate_mbit"])], order.get(r["config"], 99)))
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"bench_tc_bandwidth{'_' + tag if tag else ''}.png"
    plot(merged, target)
    print(table(merged))
    print(f"bench_tc_bandwidth: wrote {target}")
    return 0


def table(rows: list[dict]) -> str:
    """The rows as a markdown table: a line per case, per implementation measured / bound,
    / (bound + step), bare MPI / bound and predicted / measured; a repeated case's median
    with its runs' range, "1.12 (1.08-1.20)"."""
    rows = repeats_merged(rows)
    impls = list(dict.fromkeys(r["implementation"] for r in rows))
    cases = list(dict.fromkeys((r["message_bytes"], r["rate_mbit"], r["config"]) for r in rows))
    by = {(r["message_bytes"], r["rate_mbit"], r["config"], r["implementation"]): r for r in rows}
    tcp: dict = {}
    for r in rows:
        tcp.setdefault((r["message_bytes"], r["rate_mbit"]), set()).add(f"{r['tcp_over_its_bound']:.2f}")
    keys = ("measured_over_bound", "measured_over_bound_plus_step", "bare_over_bound",
            "predicted_over_measured")
    head = ["message", "Mbit/s", "plain TCP", "case"] + [
        f"{impl}: {what}" for impl in impls
        for what in ("measured / bound", "/ (bound + step)", "bare MPI / bound", "predicted / measured")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for nbytes, mbit, config in cases:
        cells = [f"{nbytes / 1e6:g} MB", f"{mbit:g}", "/".join(sorted(tcp[(nbytes, mbit)])), config]
        for impl in impls:
            r = by.get((nbytes, mbit, config, impl), {})
            cells += [("-" if not isinstance(r.get(k), float) else f"{r[k]:.2f}" if f"{k}_range" not in r
                       else f"{r[k]:.2f} ({r[k + '_range'][0]:.2f}-{r[k + '_range'][1]:.2f})") for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--quick", action="store_true", help="one rate, one size, DSGD on 2 ranks")
    parser.add_argument("--rates", default="50,100,200,400", help="Mbit/s, comma-separated")
    parser.add_argument("--dims", default="62500,250000", help="quadratic dimensions (8 d bytes a message)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--openmpi-eager", action="store_true",
                        help="Open MPI only, TCP eager limit 1 MiB (no rendezvous below it)")
    parser.add_argument("--pieces", default="",
                        help="piece sizes (bytes, comma-separated; 0: whole messages) to run each "
                             "case with (default: the transport's own)")
    parser.add_argument("--pipeline", default="",
                        help="pipelined block sizes (bytes, comma-separated; 0: tokens stepped, "
                             "sent and summed whole) to run each case with, one after the other "
                             "(MPI_TELEPORT_PIPELINE_BYTES; default: the transport's own, 1 MiB)")
    parser.add_argument("--configs", default="", help=f"a subset of {','.join(CONFIGS)}")
    parser.add_argument("--impls", default="", help="a subset of openmpi,mpich")
    parser.add_argument("--bed", default=BED[1], help="the test bed's script (jobs/netns-cluster.sh)")
    parser.add_argument("--rsh", default=AGENT, help="its remote shell (jobs/netns-rsh)")
    parser.add_argument("--hosts", default=",".join(HOSTS), help="its hosts' addresses")
    parser.add_argument("--tag", default="", help="appended to the output files' names")
    parser.add_argument("--plot", default="",
                        help="only draw: the rows of earlier results (their .json files, "
                             "comma-separated; FILE:openmpi keeps one implementation's rows) in "
                             "one figure, bench_tc_bandwidth_TAG.png in --out")
    parser.add_argument("--replace", action="store_true",
                        help="with --plot: a case (implementation, configuration, size, rate) "
                             "in several files is drawn from the last of them (a re-run of some "
                             "cases), instead of once per file")
    parser.add_argument("--pool", action="store_true",
                        help="with --plot: a case in several files is one case run several times "
                             "(more --repeat runs of it, made later): drawn at the median of them all")
    parser.add_argument("--run-flags", default="",
                        help="more flags for every run, e.g. '--sigma2 0' (the quadratic without its "
                             "gradient noise, whose draws cost CPU the bed's 2 cores lack at 1000 Mbit/s)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of every case, taken in turn (each implementation, configuration "
                             "and variant once, then again): the figure and table show each case's "
                             "median and its runs' range")
    parser.add_argument("--chains", action="store_true",
                        help="only the chained exchanges (plain TCP, MPI on 2 and 4 ranks, "
                             "Teleportation's rounds bare) against the bound, at --rates and --dims: "
                             "bench_tc_bandwidth_chains_TAG.{csv,json,png}")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat takes a number of runs, 1 or more, not {args.repeat}")
    if args.plot:
        return plot_results(args.plot.split(","), Path(args.out), args.tag, args.replace, args.pool)
    use_bed(args.bed, args.rsh, args.hosts)
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        print("bench_tc_bandwidth: needs root (namespaces, tc)", file=sys.stderr)
        return 2
    if not bed_up():
        return 2
    rates = [100.0] if args.quick else [float(r) for r in args.rates.split(",")]
    dims = [62500] if args.quick else [int(d) for d in args.dims.split(",")]
    if args.chains:
        return chains(rates, dims, Path(args.out), args.tag)
    configs = {"dsgd-2": CONFIGS["dsgd-2"]} if args.quick else CONFIGS
    if args.configs:
        configs = {c: CONFIGS[c] for c in args.configs.split(",")}
    configs = {c: (ranks, [*flags, *args.run_flags.split()]) for c, (ranks, flags) in configs.items()}
    pieces = [int(p) for p in args.pieces.split(",")] if args.pieces else [None]
    pipelines = [int(p) for p in args.pipeline.split(",")] if args.pipeline else [None]
    variants = [(piece, block) for piece in pieces for block in pipelines]
    rows = []
    try:
        for mbit in rates:
            set_rate(mbit)
            for dim in dims:
                tcp = tcp_s_per_round(8 * dim)
                print(f"plain TCP, {8 * dim / 1e6:g} MB each way, {mbit:g} Mbit/s: {tcp:.4f} s/round "
                      f"= x{tcp / wire_s(8 * dim, mbit):.2f} the bound", flush=True)
                for repeat, (name, python), (config, (ranks, flags)), (piece, block) in itertools.product(
                        range(args.repeat), implementations(args.openmpi_eager), configs.items(), variants):
                    if args.impls and name not in args.impls.split(","):
                        continue
                    with pipeline_env(block):
                        got = one_run(python, ranks, flags, dim, args.rounds, mbit,
                                      args.timeout, piece)
                    if args.openmpi_eager:
                        got["implementation"] += "+eager1MiB"
                    if piece is not None:
                        got["implementation"] += f"+pieces{piece // 1024}K" if piece else "+whole"
                    if block is not None:
                        got["implementation"] += f"+pipeline{block // 1024}K" if block else "+unpipelined"
                        got["pipeline_bytes"] = block
                    if args.run_flags:
                        got["run_flags"] = args.run_flags
                    if args.repeat > 1:
                        got["repeat"] = repeat
                    bound = physical_bound_s(config, ranks, dim, mbit, got["first_round"],
                                             got["last_round"])
                    window = window_bound_s(config, ranks, dim, mbit, got["first_round"], got["last_round"])
                    row = with_ratios({"config": config, "ranks": ranks, "dim": dim,
                                       "message_bytes": 8 * dim, "rate_mbit": mbit,
                                       "piece_bytes": piece, **got, "bound_s_per_round": bound,
                                       "window_bound_s_per_round": window, "tcp_s_per_round": tcp})
                    bare = bare_s_per_round(python, config, ranks, dim, piece,
                                            got["first_round"], got["last_round"])
                    if bare is not None:
                        row = with_ratios(dict(row, bare_mpi_s_per_round=bare))
                    rows.append(row)
                    save(rows, args, rates, dims, configs)
                    print(f"{got['implementation']:18s} {config:20s} d={dim:7d} {mbit:5.0f} Mbit/s: "
                          f"measured {row['measured_s_per_round']:.4f} s/round = x{row['measured_over_bound']:.2f}"
                          f" the bound {bound:.4f} (x{row['measured_over_bound_plus_step']:.2f} bound + step "
                          f"{row['step_s_per_round'] * 1e3:.1f} ms); model {row['predicted_s_per_round']:.4f} "
                          f"(predicted/measured {row['predicted_over_measured']:.2f}; under the "
                          f"layer x{row['layer_s_per_round'] / bound:.2f}); load "
                          f"{got['load_before']:.1f}-{got['load_after']:.1f}"
                          + (f"; bare MPI x{row['bare_over_bound']:.2f} the bound, the run "
                             f"x{row['measured_over_bare_plus_step']:.2f} bare + step"
                             if "bare_over_bound" in row else ""), flush=True)
    finally:
        set_rate(None)
    out, stem = save(rows, args, rates, dims, configs)
    plot(rows, out / f"{stem}.png")
    print(f"bench_tc_bandwidth: wrote {out}/{stem}.{{csv,json,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
