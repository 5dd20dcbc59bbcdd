"""Per-round time of Teleportation (Alg. 3, overlap; and Alg. 1, simple) under MPI
against a bare mpi4py exchange of the same communication pattern.

    python benchmarks/bench_overhead.py [--quick] [--out benchmarks/results]
                                        [--ranks 8 25] [--ds 1e3 1e4 ...] [--k K]

The script launches itself once per rank count under ``mpirun`` (``--worker``); inside,
one process per rank loops over d, so start-up is paid once per rank count.

Setting. n = ranks nodes, k = ranks // 2 tokens (2 ranks: k = 2, since k = 1 has no
gossip; 8 ranks: k = 4; 25 ranks: k = 12), ring topology over the tokens (each token has
up to 3 inputs: itself and two neighbours), schedule ``schedule.holders(seed=0, n, k, t)``,
momentum 0, lr = 0.1. Problem: a trivial one, f(x) = 1/2 ||x||^2, gradient g = x (one
copy), so the run measures the runtime, not a problem. Logging is off: the package is
driven as the engine drives it between logging rounds, ``backend.begin(phase, start, x0)``
then ``backend.step(t)`` per round.

Implementations, each timed on the same rounds of the same schedule:

* ``bare_comm`` -- communication only: per round, the round-t holder of token m Isends
  a float64 buffer of d elements to the round-(t+1) holders of tokens m-1, m, m+1
  (nothing when that is itself: a rank's own y enters its sum where it lies), the
  round-(t+1) holders post the matching Irecvs, Waitall. No arithmetic.
* ``bare`` -- the reference for Alg. 3: the same exchange plus the same local arithmetic
  as the package, written by hand: y = x - lr * g (g = copy of x) between posting the
  receives and the sends, and after Waitall x = sum_s w_s * in_s in ascending token
  order, all in preallocated buffers, its schedule precomputed before the clock starts.
  Both sides do identical floating-point work (the final token vectors of every
  implementation are checked to be bit-identical), so the ratio isolates what the package
  adds per round: planning, transport bookkeeping, Python overhead, allocations.
* ``alg3`` -- :class:`mpi_teleport.runtime.backends.mpi.MpiBackend` running Alg. 3 (overlap) over
  a ``Transport(COMM_WORLD)``.
* ``bare1`` -- the reference for Alg. 1, a hand-written loop of its own two-phase
  pattern: fetch the model from its previous holder (Isend/Irecv, then swap x and y),
  step, gossip within holders(t), sum.
* ``alg1`` -- ``MpiBackend`` running Alg. 1 (simple).

The package's fixed cost per round is reported in microseconds: alg3 - bare and
alg1 - bare1 (median per-round times); it is meaningful at small d.

Timing: every implementation runs the same rounds 0 .. T-1 from the same x0, as one
run (the package: one phase, ``backend.begin`` once, then ``backend.step(t)``; each bare
loop keeps its own tokens from block to block); the rounds are timed in blocks of R,
bracketed by barriers on rank 0's clock; block 0 is a warm-up; the implementations take
turns within each block (order rotated per block, so background load hits all alike).
Per-round time = median over the timed blocks of (block time / R). Up to d = 10^4 a block
is R = BLOCK_ROUNDS rounds, aligned with the package's planning, so each timed block pays
one block compilation in full, as a run does; R shrinks for larger d (10^7 doubles = 80 MB
per message), where a compilation is a negligible share of a block. The final token
vectors of all implementations are compared (``identical``). Targets: alg3 <=
1.10 x bare and alg1 <= 1.10 x bare1 for d >= 10^4, alg3 <= 1.5 x bare at d = 10^3.

Oversubscription (more ranks than the 2 cores here) makes timings noisy; mpirun runs
with the flags that made oversubscribed exchanges fastest here. A (ranks, d) pair whose
buffers would not fit into the available memory is skipped with a note.

Writes bench_overhead.csv, bench_overhead.json and bench_overhead.png into --out.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET = 1.10  # the target: Alg. 3 / bare and Alg. 1 / bare1 for d >= TARGET_MIN_D
TARGET_MIN_D = 10**4
SMALL_TARGET, SMALL_D = 1.5, 10**3  # and Alg. 3 / bare at d = 1e3
LR = 0.1
SEED = 0
TOPOLOGY = "ring"
IMPLS = ("bare_comm", "bare", "alg3", "bare1", "alg1")
BUFFERS_PER_RANK = 17  # x0; bare: x, y, tmp, 3 inboxes; each backend: x, y, 3 inboxes (+ work)


def plan(d: int, quick: bool) -> tuple[int, int]:
    """(rounds per block, timed blocks) for vectors of d doubles. Up to d = 1e4 a timed
    block is one block of the package's planning (BLOCK_ROUNDS rounds, aligned with it), so
    every timed block pays exactly one block compilation, as a run does; from d = 1e5 a
    round costs so much more than its share of a compilation (about 1 us) that shorter
    blocks are timed."""
    from mpi_teleport.measure import BLOCK_ROUNDS

    if quick:
        return (BLOCK_ROUNDS // 4, 5) if d <= 10**4 else (25, 5) if d <= 10**5 else (2, 2)
    if d <= 10**4:  # the oversubscribed rows (8, 25 ranks) vary most here: more blocks
        return BLOCK_ROUNDS, 11
    if d <= 10**5:
        return 128, 11
    if d <= 10**6:
        return 8, 5
    return 2, 5


# ----------------------------------------------------------------------------- worker


class Trivial:
    """f(x) = 1/2 ||x||^2 on every node: g = x, written into ``out`` (no allocation)."""

    def __init__(self, d: int):
        self.d = self.dim = d

    def gradient(self, nodes, x, t, out=None):
        if out is None:
            return np.array(x, copy=True)
        np.copyto(out, x)
        return out


def token_of(holders: np.ndarray, rank: int) -> int:
    hit = np.flatnonzero(holders == rank)
    return int(hit[0]) if len(hit) else -1


def bare_plan(rank: int, n: int, k: int, rounds: range, tag_of) -> list[tuple]:
    """Alg. 3 per round, precomputed outside the clock: receives (source, slot), sends
    (dest), the inbox slot of a send to itself, this rank's old and new token, the weights."""
    from mpi_teleport.measure import schedule
    from mpi_teleport.measure import topology as topo

    holders = {t: schedule.holders(SEED, n, k, t) for t in range(rounds.start, rounds.stop + 1)}
    out = []
    for t in rounds:
        now, nxt = holders[t], holders[t + 1]
        w = topo.mixing(TOPOLOGY, k, t)
        mine, j = token_of(now, rank), token_of(nxt, rank)
        recvs, weights = [], []
        if j >= 0:
            sources, wts = w.row(j)
            weights = [float(v) for v in wts]
            recvs = [(int(now[m]), s) for s, m in enumerate(sources) if int(now[m]) != rank]
        sends, self_slot = [], -1
        if mine >= 0:
            for r in w.receivers(mine):
                dest = int(nxt[r])
                if dest == rank:
                    self_slot = int(np.flatnonzero(w.row(int(r))[0] == mine)[0])
                else:
                    sends.append(dest)
        out.append((tag_of(t), recvs, sends, self_slot, mine, j, weights))
    return out


def bare1_plan(rank: int, n: int, k: int, rounds: range, tag_of) -> list[tuple]:
    """Alg. 1 per round (its own two-phase pattern), precomputed outside the clock: where
    this rank's entry token goes and whence its round-t token comes (model fetch, line 8),
    then the gossip within holders(t): receives (source, slot), sends (dest), the slot of
    its own y, the weights. Round t's tokens sit with holders(t - 1) on entry (holders(0)
    at round 0)."""
    from mpi_teleport.measure import schedule
    from mpi_teleport.measure import topology as topo

    first = max(rounds.start - 1, 0)
    holders = {t: schedule.holders(SEED, n, k, t) for t in range(first, rounds.stop)}
    out = []
    for t in rounds:
        prev, now = holders[max(t - 1, 0)], holders[t]
        w = topo.mixing(TOPOLOGY, k, t)
        held, m = token_of(prev, rank), token_of(now, rank)
        model_to = int(now[held]) if held >= 0 else -1
        model_from = int(prev[m]) if m >= 0 else -1
        recvs, sends, weights, self_slot = [], [], [], -1
        if m >= 0:
            sources, wts = w.row(m)
            weights = [float(v) for v in wts]
            for s, src in enumerate(sources):
                if int(now[src]) == rank:
                    self_slot = s
                else:
                    recvs.append((int(now[src]), s))
            sends = [int(now[r]) for r in w.receivers(m) if int(now[r]) != rank]
        out.append((tag_of(t), model_to if model_to != rank else -1,
                    model_from if model_from != rank else -1, recvs, sends, self_slot, m,
                    weights))
    return out


def run_bare(comm, MPI, plans, x, y, inbox, tmp, arithmetic: bool) -> None:
    """The hand-written Alg. 3 round loop (with or without its arithmetic)."""
    waitall, irecv, isend = MPI.Request.Waitall, comm.Irecv, comm.Isend
    for tag, recvs, sends, self_slot, mine, j, weights in plans:
        reqs = [irecv(inbox[s], src, tag) for src, s in recvs]
        if mine >= 0:
            if arithmetic:  # local_step with g = x: g = copy(x); g *= lr; y = x - g
                np.copyto(y, x)
                y *= LR
                np.subtract(x, y, out=y)
            reqs += [isend(y, dest, tag) for dest in sends]
        if reqs:
            waitall(reqs)
        if j >= 0 and arithmetic:  # x_j = sum_s w_s in_s, ascending token order
            inputs = [y if s == self_slot else inbox[s] for s in range(len(weights))]
            np.multiply(inputs[0], weights[0], out=x)  # (one's own y is used where it is)
            for s in range(1, len(weights)):
                np.multiply(inputs[s], weights[s], out=tmp)
                x += tmp


def run_bare1(comm, MPI, plans, bufs, inbox, tmp) -> None:
    """The hand-written Alg. 1 round loop: fetch the model (a swap of x and y when it
    arrives), step, gossip within holders(t), sum. ``bufs`` = [x, y], swapped in place."""
    waitall, irecv, isend = MPI.Request.Waitall, comm.Irecv, comm.Isend
    for tag, model_to, model_from, recvs, sends, self_slot, m, weights in plans:
        x, y = bufs
        reqs = [irecv(y, model_from, tag)] if model_from >= 0 else []
        if model_to >= 0:
            reqs.append(isend(x, model_to, tag))
        if reqs:
            waitall(reqs)
        if model_from >= 0:
            bufs.reverse()
            x, y = bufs
        if m < 0:
            continue
        np.copyto(y, x)  # local_step with g = x
        y *= LR
        np.subtract(x, y, out=y)
        reqs = [irecv(inbox[s], src, tag + 1) for src, s in recvs]
        reqs += [isend(y, dest, tag + 1) for dest in sends]
        if reqs:
            waitall(reqs)
        inputs = [y if s == self_slot else inbox[s] for s in range(len(weights))]
        np.multiply(inputs[0], weights[0], out=x)
        for s in range(1, len(weights)):
            np.multiply(inputs[s], weights[s], out=tmp)
            x += tmp


def digest(x: np.ndarray) -> str:
    return hashlib.blake2b(memoryview(x), digest_size=16).hexdigest()


def default_k(n: int) -> int:
    """ranks // 2 tokens; 2 ranks get k = 2 (k = 1 would have no gossip at all)."""
    return n if n <= 2 else n // 2


def worker(args) -> int:
    from mpi4py import MPI

    from mpi_teleport.measure import schedule
    from mpi_teleport.measure import MpiBackend
    from mpi_teleport.measure import RunSpec
    from mpi_teleport.measure import KIND_Y, Transport

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    k = args.k or default_k(n)
    transport = Transport(comm)
    placement = lambda t: schedule.holders(SEED, n, k, t)  # noqa: E731
    rows = []
    for d in args.ds:
        began = time.perf_counter()
        rounds_per_block, blocks = plan(d, args.quick)
        total = (blocks + 1) * rounds_per_block
        x0 = ((np.arange(d) % 17) - 8.0) / 8.0
        problem = Trivial(d)
        backends = {}
        for name, variant in (("alg3", "overlap"), ("alg1", "simple")):
            spec = RunSpec("teleportation", n, k, total, LR, topology=TOPOLOGY,
                           variant=variant, seed=SEED)
            backend = backends[name] = MpiBackend(problem, spec, transport)
            backend.begin(spec.phases()[0], 0, x0)  # one phase over all blocks, as a run
        # each bare loop its own tokens (they continue from block to block, as the package's)
        x, y, x1, y1, tmp = (np.zeros(d) for _ in range(5))
        inbox = [np.zeros(d) for _ in range(3)]
        first = token_of(placement(0), rank) >= 0  # round 0: the tokens sit with holders(0)
        if first:
            x[...] = x0
            x1[...] = x0
        bufs = [x1, y1]
        times = {name: [] for name in IMPLS}
        finals = {}
        for b in range(blocks + 1):  # block 0: warm-up
            rounds = range(b * rounds_per_block, (b + 1) * rounds_per_block)
            plans = bare_plan(rank, n, k, rounds, lambda t: transport.tag(t, KIND_Y))
            plans1 = bare1_plan(rank, n, k, rounds, lambda t: 2 * t % 30000)
            order = IMPLS[b % len(IMPLS):] + IMPLS[:b % len(IMPLS)]
            for name in order:
                comm.Barrier()
                start = MPI.Wtime()
                if name in backends:
                    step = backends[name].step
                    for t in rounds:
                        step(t)
                elif name == "bare1":
                    run_bare1(comm, MPI, plans1, bufs, inbox, tmp)
                else:
                    run_bare(comm, MPI, plans, x, y, inbox, tmp, arithmetic=name == "bare")
                comm.Barrier()
                elapsed = MPI.Wtime() - start
                if b > 0:
                    times[name].append(elapsed / len(rounds))
                if b == blocks and name != "bare_comm":
                    if name in backends:
                        m, final = backends[name].held[1], backends[name].state.x
                    else:
                        after = placement(total if name == "bare" else total - 1)
                        m, final = token_of(after, rank), bufs[0] if name == "bare1" else x
                    mine = (m, digest(final)) if m >= 0 else None
                    held = comm.gather(mine, root=0)
                    finals[name] = dict(h for h in held if h is not None) if rank == 0 else None
        for backend in backends.values():
            backend.close()
        del backends, x, y, x1, y1, tmp, inbox
        if rank == 0:
            med = {name: statistics.median(v) for name, v in times.items()}
            identical = (finals["alg3"] == finals["bare"] == finals["alg1"] == finals["bare1"])
            row = {
                "ranks": n, "k": k, "d": d, "rounds_per_block": rounds_per_block,
                "blocks": blocks, **{f"{name}_s": med[name] for name in IMPLS},
                **{f"{name}_min_s": min(times[name]) for name in IMPLS},
                "alg3_over_bare": med["alg3"] / med["bare"],
                "alg1_over_bare": med["alg1"] / med["bare"],
                "alg1_over_bare1": med["alg1"] / med["bare1"],
                "alg3_over_alg1": med["alg3"] / med["alg1"],
                "alg3_over_bare_comm": med["alg3"] / med["bare_comm"],
                "alg3_fixed_us": (med["alg3"] - med["bare"]) * 1e6,
                "alg1_fixed_us": (med["alg1"] - med["bare1"]) * 1e6,
                "identical": identical,
                "samples": times,
            }
            row["pass"] = target_met(row)
            rows.append(row)
            print(f"[{n} ranks] d={d:.0e}: bare {med['bare'] * 1e3:.3f} ms, alg3 "
                  f"{med['alg3'] * 1e3:.3f} ms, bare1 {med['bare1'] * 1e3:.3f} ms, alg1 "
                  f"{med['alg1'] * 1e3:.3f} ms, alg3/bare {row['alg3_over_bare']:.2f}, "
                  f"alg1/bare1 {row['alg1_over_bare1']:.2f}, fixed "
                  f"{row['alg3_fixed_us']:.0f}/{row['alg1_fixed_us']:.0f} us, "
                  f"identical {identical} ({time.perf_counter() - began:.0f} s)",
                  file=sys.stderr, flush=True)
            with open(args.worker_out, "w") as f:  # after every d: partial results survive
                json.dump(rows, f)
    return 0


def target_met(row: dict) -> bool | None:
    """The targets: Alg. 3 <= 1.10 x bare for d >= 1e4 and <= 1.5 x at d = 1e3; Alg. 1 <=
    1.10 x its own bare loop for d >= 1e4. None where no target applies."""
    d = row["d"]
    if d >= TARGET_MIN_D:
        return row["alg3_over_bare"] <= TARGET and row["alg1_over_bare1"] <= TARGET
    if d >= SMALL_D:
        return row["alg3_over_bare"] <= SMALL_TARGET
    return None


# ----------------------------------------------------------------------------- launcher


def mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def launch(ranks: int, ds: list[int], args, timeout: float) -> tuple[list[dict], str]:
    from mpi_teleport.measure import mpi_env, mpirun_command

    fd, result = tempfile.mkstemp(prefix="bench_overhead_", suffix=".json")
    os.close(fd)
    cmd = mpirun_command(ranks, [sys.executable, str(Path(__file__).resolve()), "--worker",
                                 "--worker-out", result, "--ds", *[str(d) for d in ds]])
    if args.quick:
        cmd.append("--quick")
    if args.k:
        cmd += ["--k", str(args.k)]
    env = mpi_env(dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    note = ""
    try:
        proc.wait(timeout=timeout)
        if proc.returncode:
            note = f"mpirun -n {ranks} exited with status {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        note = f"mpirun -n {ranks} killed after {timeout:.0f}s"
    try:
        with open(result) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        rows = []
    finally:
        os.unlink(result)
    return rows, note


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3f}" if s < 1 else f"{s * 1e3:.0f}"


def plot(rows: list[dict], path: Path, quick: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rank_counts = sorted({r["ranks"] for r in rows})
    fig, axes = plt.subplots(1, len(rank_counts), figsize=(5.5 * len(rank_counts), 4.5),
                             squeeze=False)
    style = {"bare_comm": ("exchange only (bare, no arithmetic)", ":", "tab:gray"),
             "bare": ("bare mpi4py (exchange + same arithmetic)", "-", "black"),
             "alg3": ("Alg. 3 overlap (package)", "-", "tab:blue"),
             "bare1": ("bare mpi4py, Alg. 1 pattern", "--", "tab:gray"),
             "alg1": ("Alg. 1 simple (package)", "--", "tab:orange")}
    for ax, ranks in zip(axes[0], rank_counts):
        sel = sorted((r for r in rows if r["ranks"] == ranks), key=lambda r: r["d"])
        ds = [r["d"] for r in sel]
        for name, (lab, ls, color) in style.items():
            ax.plot(ds, [r[f"{name}_s"] for r in sel], ls, marker="o", color=color, label=lab)
        for r in sel:
            if r["pass"] is not None:
                ax.annotate(f"{r['alg3_over_bare']:.2f}x", (r["d"], r["alg3_s"]),
                            textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8,
                            color="tab:green" if r["pass"] else "tab:red")
        ax.set_xscale("log")
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 2)  # room for the ratio labels
        ax.set_xlabel("d (float64 elements per message)")
        ax.set_ylabel("median time per round (s)")
        ax.set_title(f"{ranks} ranks, k = {sel[0]['k'] if sel else '?'}, ring "
                     f"(2 cores){' [quick]' if quick else ''}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Per-round time; labels: Alg. 3 / bare (target <= {TARGET} for d >= 1e4, "
                 f"<= {SMALL_TARGET} at 1e3)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="d <= 1e5 and few rounds (CI-sized)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                        help="output directory (default benchmarks/results)")
    parser.add_argument("--ranks", type=int, nargs="+", default=None,
                        help="rank counts (default 2 8 25)")
    parser.add_argument("--ds", type=float, nargs="+", default=None,
                        help="vector sizes (default 1e3 1e4 1e5 1e6 1e7; quick: up to 1e5)")
    parser.add_argument("--k", type=int, default=None,
                        help="tokens (default ranks // 2; 2 ranks: 2)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mpirun")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw bench_overhead.png from the JSON in --out")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ds is None:
        args.ds = [1e3, 1e4, 1e5] if args.quick else [1e3, 1e4, 1e5, 1e6, 1e7]
    args.ds = [int(d) for d in args.ds]
    if args.worker:
        return worker(args)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        with open(out / "bench_overhead.json") as f:
            saved = json.load(f)
        plot(saved["rows"], out / "bench_overhead.png", saved["meta"]["quick"])
        return 0
    rows, notes = [], []
    load_at_start = os.getloadavg()
    for ranks in args.ranks or [2, 8, 25]:
        ds = []
        for d in args.ds:
            need = ranks * d * 8 * BUFFERS_PER_RANK
            avail = mem_available()
            if avail is not None and need > 0.8 * avail:
                notes.append(f"skipped ranks={ranks} d={d:.0e}: needs ~{need / 2**30:.1f} GiB, "
                             f"{avail / 2**30:.1f} GiB available")
                print(notes[-1], flush=True)
            else:
                ds.append(d)
        if not ds:
            continue
        got, note = launch(ranks, ds, args, args.timeout)
        rows += got
        if note:
            notes.append(note)
            print(note, flush=True)

    print(f"\n{'ranks':>5}{'k':>4}{'d':>7}{'R':>5}{'bare ms':>10}{'alg3 ms':>10}{'bare1 ms':>10}"
          f"{'alg1 ms':>10}{'alg3/bare':>11}{'alg1/bare1':>11}{'fixed3 us':>10}{'fixed1 us':>10}"
          f"  same  verdict")
    for r in rows:
        verdict = "-" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        print(f"{r['ranks']:>5}{r['k']:>4}{r['d']:>7.0e}{r['rounds_per_block']:>5}"
              f"{fmt_ms(r['bare_s']):>10}{fmt_ms(r['alg3_s']):>10}{fmt_ms(r['bare1_s']):>10}"
              f"{fmt_ms(r['alg1_s']):>10}{r['alg3_over_bare']:>11.2f}{r['alg1_over_bare1']:>11.2f}"
              f"{r['alg3_fixed_us']:>10.1f}{r['alg1_fixed_us']:>10.1f}"
              f"  {'yes' if r['identical'] else 'NO':<4}  {verdict}")

    fields = ["ranks", "k", "d", "rounds_per_block", "blocks", "bare_comm_s", "bare_s", "alg3_s",
              "bare1_s", "alg1_s", "alg3_over_bare", "alg1_over_bare", "alg1_over_bare1",
              "alg3_over_alg1", "alg3_over_bare_comm", "alg3_fixed_us", "alg1_fixed_us",
              "identical", "pass"]
    with open(out / "bench_overhead.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    meta = {
        "benchmark": "bench_overhead", "quick": args.quick, "target_ratio": TARGET,
        "target_min_d": TARGET_MIN_D, "topology": TOPOLOGY, "lr": LR, "seed": SEED,
        "k": "ranks // 2 (2 ranks: 2)" if not args.k else args.k,
        "small_target": SMALL_TARGET, "small_d": SMALL_D,
        "load_average": {"start": load_at_start, "end": os.getloadavg()}, "problem": "trivial, g = x",
        "times": "median over timed blocks of block time / rounds, rank 0, barrier-bracketed",
        "python": platform.python_version(), "numpy": np.__version__,
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "notes": notes,
    }
    with open(out / "bench_overhead.json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    if rows:
        plot(rows, out / "bench_overhead.png", args.quick)
    print(f"wrote {out / 'bench_overhead.csv'}, .json, .png")
    judged = [r for r in rows if r["pass"] is not None]
    misses = [f"{r['ranks']} ranks d={r['d']:.0e}" for r in judged if not r["pass"]]
    print("the targets met in every judged case" if judged and not misses
          else f"target missed: {', '.join(misses)}" if misses else "no case judged")
    if any(not r["identical"] for r in rows):
        print("WARNING: final token vectors differ between bare, Alg. 3 and Alg. 1")
    for note in notes:
        print("note: " + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
