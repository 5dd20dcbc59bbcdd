"""What watching for a signal between logging rounds costs a round, and how soon a signal
stops the run (mpi_teleport/runtime/stop_watch.py).

    python benchmarks/bench_stop_watch.py [--ranks 4] [--dims 50,20000,1000000]
                                          [--seconds 3] [--out benchmarks/results]

Setting: Teleportation, n = ranks nodes, k = ranks // 2 tokens, the synthetic quadratic
(``problems.quadratic``) with d elements per token, under ``mpirun -n ranks`` (the script
itself as ``--worker``), through the Python API with ``comm=MPI.COMM_WORLD`` and one
logging round at each end (``log_every`` = the rounds: the watch alone looks for a
signal). For each d, in the same processes:

* ``on``: a run of about ``--seconds`` with the watch; its per-round hook
  (``StopWatch.boundary``) timed on each rank's clock where it watches (completes and
  starts the reduction), and costed between watches at its counter's time (measured
  alone, 200,000 calls): the watch's work per round, against the run's round;
* ``off``: the same run with the watch left out (as before it existed): the end-to-end
  difference, which on a shared or oversubscribed machine moves by more than the watch
  costs (the hook's own time above is the measure);
* ``stop``: a run three times as long, rank 0 sends itself SIGTERM a third of the way
  through: the wall time
  from the signal to the stop raised in the script on rank 0 (agreement only: no
  checkpoint is written), and the watch period (rounds) then in use.

Prints a table and writes bench_stop_watch.csv, .json and .png into --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ["ranks", "dim", "rounds", "round_us_on", "round_us_off", "watch_us_per_round",
          "watch_share_pct", "watches", "period_at_stop", "stop_latency_s", "stop_round"]


def worker(args) -> int:
    from mpi4py import MPI

    import mpi_teleport as mt
    from mpi_teleport.measure import keeper
    from mpi_teleport.measure import quadratic
    from mpi_teleport.measure import stop_watch

    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    spent = {"s": 0.0, "watches": 0}
    plain = stop_watch.StopWatch.boundary
    last_watch: list = []

    def timed(self, flag):  # (the watches timed; the rounds between: counter_s each)
        last_watch[:] = [self]
        if self._count + 1 < self.period:
            return plain(self, flag)
        a = time.perf_counter()
        out = plain(self, flag)
        spent["s"] += time.perf_counter() - a
        spent["watches"] += 1
        return out

    counting = stop_watch.StopWatch(lambda values: None)  # the call between two watches
    counting.period = 1 << 62
    a = time.perf_counter()
    for _ in range(200000):
        counting.boundary(0)
    counter_s = (time.perf_counter() - a) / 200000

    stop_watch.StopWatch.boundary = timed
    real_watch_for = keeper.watch_for

    def run(dim: int, rounds: int, watch: bool = True):
        keeper.watch_for = real_watch_for if watch else (lambda backend, term: None)
        problem = quadratic(n, seed=0, dim=dim)
        comm.Barrier()
        a = time.perf_counter()
        mt.teleportation(problem, nodes=n, k=max(1, n // 2), rounds=rounds, lr=0.01,
                         log_every=rounds, comm=comm, progress=False)
        return time.perf_counter() - a

    rows = []
    for dim in args.dims:
        # two short runs: the round time and the call's own set-up, for ~--seconds of rounds
        t1, longer, t2 = run(dim, 100), 400, 0.0
        while True:  # (rank 0 decides, every rank follows)
            t2 = run(dim, longer)
            if comm.bcast(t2 - t1 > 0.3 or longer >= 1 << 22):
                break
            longer *= 4
        per_round = max((t2 - t1) / (longer - 100), 1e-7)
        setup = max(0.0, t1 - 100 * per_round)
        rounds = int(comm.bcast(max(100, int(args.seconds / per_round))))
        spent.update(s=0.0, watches=0)
        on = run(dim, rounds)
        watch_s = comm.allreduce(spent["s"] + counter_s * (rounds - spent["watches"]), op=MPI.MAX)
        watches = spent["watches"]
        off = run(dim, rounds, watch=False)
        # the stop: SIGTERM to rank 0 half-way
        sent: list = []
        if rank == 0:
            def send():
                sent.append(time.perf_counter())
                os.kill(os.getpid(), signal.SIGTERM)
            threading.Timer(setup + rounds * per_round, send).start()  # (mid-run)
        stopped_round, latency = None, None
        try:
            run(dim, rounds * 3)
        except mt.Stopped as exc:
            latency = time.perf_counter() - sent[0] if sent else None
            stopped_round = exc.round
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (ignored after a stop: back)
        period = last_watch[0].period if last_watch else None
        if rank == 0:
            rows.append({
                "ranks": n, "dim": dim, "rounds": rounds,
                "round_us_on": 1e6 * on / rounds, "round_us_off": 1e6 * off / rounds,
                "watch_us_per_round": 1e6 * watch_s / rounds,
                "watch_share_pct": 100 * watch_s / on, "watches": watches,
                "period_at_stop": period, "stop_latency_s": latency,
                "stop_round": stopped_round})
    if rank == 0:
        Path(args.result).write_text(json.dumps(rows))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--dims", default="50,20000,1000000")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.dims = [int(float(d)) for d in str(args.dims).split(",")]
    if args.worker:
        return worker(args)

    from mpi_teleport.measure import mpi_env, mpirun_command

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = out / "bench_stop_watch.tmp.json"
    cmd = mpirun_command(args.ranks, [sys.executable, str(Path(__file__).resolve()), "--worker",
                                      "--dims", ",".join(map(str, args.dims)), "--seconds",
                                      str(args.seconds), "--result", str(result)])
    env = mpi_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return proc.returncode
    rows = json.loads(result.read_text())
    result.unlink()
    head = (f"{'ranks':>5} {'d':>8} {'rounds':>8} {'round us':>9} {'off us':>8} "
            f"{'watch us':>9} {'share %':>8} {'watches':>7} {'period':>7} {'stop s':>7}")
    print(head)
    for r in rows:
        print(f"{r['ranks']:>5} {r['dim']:>8} {r['rounds']:>8} {r['round_us_on']:>9.1f} "
              f"{r['round_us_off']:>8.1f} {r['watch_us_per_round']:>9.3f} "
              f"{r['watch_share_pct']:>8.3f} {r['watches']:>7} {r['period_at_stop'] or 0:>7} "
              f"{(r['stop_latency_s'] or float('nan')):>7.2f}")
    meta = {"machine": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)}
    (out / "bench_stop_watch.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    with open(out / "bench_stop_watch.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    plot(rows, out / "bench_stop_watch.png")
    return 0


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"d={r['dim']}" for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.bar(labels, [r["watch_share_pct"] for r in rows], color="tab:blue")
    a.axhline(1.0, color="tab:red", linestyle="--", label="1 % of a round")
    a.set_ylabel("watch's work, % of a round")
    a.set_ylim(0, 1.2)
    a.legend()
    b.bar(labels, [r["stop_latency_s"] or 0 for r in rows], color="tab:green")
    b.axhline(1.0, color="tab:red", linestyle="--", label="1 s")
    b.set_ylabel("signal -> stop on rank 0 (s)")
    b.legend()
    fig.suptitle(f"stop watch, {rows[0]['ranks']} ranks (Teleportation, quadratic)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
