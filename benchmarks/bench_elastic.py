"""The price of elastic mode: per-round time against the plain mode, measured interleaved in
one job, and the time from a killed rank to the next completed round.

    python benchmarks/bench_elastic.py [--quick] [--ranks 4] [--ds 1e4 1e5]
                                       [--rounds 1000] [--repeats 5] [--out benchmarks/results]

The script launches itself under ``mpirun --with-ft ulfm`` (``--worker``; ULFM on for
every mode, so the comparison isolates what elastic mode adds); inside, one process per
rank drives the engine (:func:`mpi_teleport.runtime.engine.execute`) on the paper's
quadratic problem (Teleportation, Alg. 3, k = ranks // 2, ring, lr 0.01, momentum 0.5,
logging at the first and last round only) with these back ends on the same rounds:

* ``compiled`` -- the plain mode: :class:`~mpi_teleport.runtime.backends.mpi.MpiBackend`
  with the compiled rounds (persistent channels);
* ``elastic`` -- :class:`~mpi_teleport.elastic.backend.ElasticBackend` with the
  interval between agreements chosen by the run (``--agree-every 0``, the default): the
  compiled rounds, a copy of the held token and a non-blocking agreement at each agreed
  boundary;
* ``every`` -- the same agreeing at every round boundary (``--agree-every 1``: a loss
  takes effect at the round it happened).

A machine shared with other work is noisy, so the modes run in turns inside one job,
``--repeats`` times (the order rotated each repeat): each repeat gives each mode's
per-round time (the run's ``time_s`` at its last round, logging excluded, / rounds) and
the ratio to the plain run of the same repeat, taken moments apart. Reported: the median
over the repeats and the spread (smallest, largest), with the machine (CPU model, cores)
and its load (/proc/loadavg) before, between and after.

Then, for the recovery time, jobs in which rank ``ranks - 1`` SIGKILLs itself at the
start of round ``rounds // 2`` (the tests' hook, ``MPI_TELEPORT_TEST_DIE``), for each
elastic mode: each survivor notes when it entered that round, when it completed the first
round after the recovery (``next_s``: the kill to the next completed round) and when it
completed the killed round again (``redone_s``: every round lost to the rollback redone);
the largest over the survivors counts (the kill comes within microseconds of the dying
rank's entry).

Writes bench_elastic.csv, bench_elastic.json and bench_elastic.png into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("compiled", "elastic", "every")
AGREE = {"elastic": 0, "every": 1}  # the elastic modes' --agree-every


def _spec(n: int, rounds: int):
    from mpi_teleport.measure import RunSpec

    return RunSpec("teleportation", n, max(1, n // 2), rounds, 0.01, 0.5, "ring", "overlap", 0)


def _run(mode: str, comm, d: int, rounds: int, probe=None) -> tuple[float, int]:
    """One run on this rank: its seconds per round (rank 0's record, shared) and the
    interval between agreements it ran with (1: plain)."""
    from mpi_teleport.measure import engine
    from mpi_teleport.measure import ElasticBackend
    from mpi_teleport.measure import MpiBackend
    from mpi_teleport.measure import Recorder
    from mpi_teleport.measure import RunFiles
    from mpi_teleport.measure import with_defaults
    from mpi_teleport.measure import Quadratic
    from mpi_teleport.measure import Logging
    from mpi_teleport import RunSettings
    from mpi_teleport.measure import ElasticTransport, Transport

    n = comm.Get_size()
    spec, logging = _spec(n, rounds), Logging(log_every=rounds)
    problem = with_defaults(Quadratic(n=n, d=d, sigma2=10.0, zeta2=10.0, seed=0))
    if mode in AGREE:
        transport = ElasticTransport(comm)
        backend = ElasticBackend(problem, spec, transport, agree_every=AGREE[mode])
    else:
        transport = Transport.duplicate(comm)
        backend = MpiBackend(problem, spec, transport, compiled=True)
    if probe is not None:
        probe(backend)
    recorder = Recorder(spec, logging, problem, RunFiles(None))
    result = engine.execute(problem, RunSettings(spec, logging), backend, recorder)
    backend.close()
    if mode not in AGREE or transport.living == list(range(n)):
        transport.free()
    return result.records[-1]["time_s"] / rounds, backend.agree_every


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if args.kill_at is not None:
        return _kill_worker(args, comm, rank)
    rows = []
    for d in args.ds:
        d = int(d)
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        chosen, loads = [], []
        for rep in range(args.repeats):
            order = MODES[rep % len(MODES):] + MODES[:rep % len(MODES)]
            for mode in order:
                per_round, every = _run(mode, comm, d, args.rounds)
                times[mode].append(per_round)
                if mode == "elastic":
                    chosen.append(every)
            loads.append(_load())
        rows.append({"d": d, "times_s": times, "agree_every_chosen": chosen, "loadavg": loads})
    if rank == 0:
        Path(args.worker_out).write_text(json.dumps(rows))
    sys.stdout.flush()
    os._exit(0)


def _kill_worker(args, comm, rank) -> int:
    """A job that loses rank n - 1 at round kill_at: each survivor's times."""
    marks: dict[str, float] = {}

    def probe(backend):
        keep, enter, step, recover = backend.keep, backend.enter, backend.step, backend.recover

        def entered(r):
            if r == args.kill_at and "enter" not in marks:
                marks["enter"] = time.perf_counter()

        def timed_keep(r):
            entered(r)
            keep(r)

        def timed_enter(r):
            entered(r)
            enter(r)

        def timed_recover(r):
            recover(r)
            marks["recovered"] = time.perf_counter()
            marks["rolled_back_to"] = r

        def timed_step(t):
            step(t)
            if "recovered" in marks:
                now = time.perf_counter()
                marks.setdefault("next", now)
                if t == args.kill_at:
                    marks.setdefault("redone", now)

        backend.keep, backend.enter, backend.step = timed_keep, timed_enter, timed_step
        backend.recover = timed_recover

    _run(args.mode, comm, int(args.ds[0]), args.rounds, probe)
    took = {"next_s": marks["next"] - marks["enter"], "redone_s": marks["redone"] - marks["enter"],
            "rolled_back_to": marks["rolled_back_to"]}
    Path(f"{args.worker_out}.{rank}").write_text(json.dumps(took))  # (the launcher takes the largest)
    sys.stdout.flush()
    os._exit(0)  # (after a loss MPI_Finalize may wait for the dead)


def _launch(args, extra: list[str], env: dict | None = None):
    from mpi_teleport.measure import mpi_env, mpirun_command

    out = Path(args.out) / f".bench_elastic_worker_{os.getpid()}.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--worker-out", str(out),
            "--rounds", str(args.rounds), "--repeats", str(args.repeats),
            "--ds", *[str(d) for d in args.ds], *extra, "--elastic"]  # (--elastic: ULFM on)
    cmd = mpirun_command(args.ranks, argv)
    subprocess.run(cmd, env={**mpi_env(), "PYTHONPATH": str(ROOT), **(env or {})},
                   timeout=args.timeout, check=False, cwd=ROOT)
    if "--kill-at" in extra:  # the survivors' times
        parts = sorted(out.parent.glob(out.name + ".*"))
        took = [json.loads(p.read_text()) for p in parts]
        for p in parts:
            p.unlink()
        return {"next_s": max(t["next_s"] for t in took),
                "redone_s": max(t["redone_s"] for t in took),
                "rolled_back_to": took[0]["rolled_back_to"], "survivors": len(took)}
    rows = json.loads(out.read_text())
    out.unlink()
    return rows


def machine() -> dict:
    """The CPU model, its cores and memory: what the figures were measured on."""
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    mem = next((int(line.split()[1]) // 1024 // 1024 for line in
                Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")), None)
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": mem,
            "system": f"{platform.system()} {platform.release()}"}


def summarize(row: dict) -> dict:
    """Median and spread (smallest, largest) over the repeats: per-round times (us) and
    each elastic mode's ratio to the plain run of the same repeat."""
    times = row["times_s"]
    out = {"d": row["d"], "repeats": len(times["compiled"])}
    for mode in MODES:
        us = [1e6 * t for t in times[mode]]
        out[f"{mode}_us"] = statistics.median(us)
        out[f"{mode}_us_min"], out[f"{mode}_us_max"] = min(us), max(us)
    for mode in AGREE:
        ratios = [e / c for e, c in zip(times[mode], times["compiled"])]
        out[f"{mode}_over_compiled"] = statistics.median(ratios)
        out[f"{mode}_over_compiled_min"] = min(ratios)
        out[f"{mode}_over_compiled_max"] = max(ratios)
    chosen = row["agree_every_chosen"]
    out["agree_every_chosen"] = statistics.median(chosen) if chosen else None
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="d = 1e4, 300 rounds, 3 repeats, 1 kill")
    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks = nodes (default 4)")
    parser.add_argument("--ds", type=float, nargs="+", default=None,
                        help="token sizes d (default 1e4 1e5)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per run (default 1000)")
    parser.add_argument("--repeats", type=int, default=None, help="turns of every mode (default 5)")
    parser.add_argument("--kills", type=int, default=None,
                        help="recovery jobs per elastic mode (default 3)")
    parser.add_argument("--kill-d", type=float, default=1e4, help="d of the recovery jobs (default 1e4)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    parser.add_argument("--kill-at", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="elastic", help=argparse.SUPPRESS)
    parser.add_argument("--elastic", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.ds = args.ds or ([1e4] if args.quick else [1e4, 1e5])
    args.rounds = args.rounds or (300 if args.quick else 1000)
    args.repeats = args.repeats or (3 if args.quick else 5)
    args.kills = args.kills if args.kills is not None else (1 if args.quick else 3)
    if args.worker:
        return worker(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_before = _load()
    raw = _launch(args, [])
    load_between = _load()
    kill_at = args.rounds // 2
    recoveries: dict[str, list] = {}
    for mode in AGREE:
        for _ in range(args.kills):
            job = argparse.Namespace(**{**vars(args), "ds": [args.kill_d]})
            recoveries.setdefault(mode, []).append(_launch(
                job, ["--kill-at", str(kill_at), "--mode", mode],
                {"MPI_TELEPORT_TEST_DIE": f"{args.ranks - 1}@{kill_at}"}))
    costs = [summarize(row) for row in raw]
    command = "python benchmarks/bench_elastic.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    result = {"started": started, "command": command.strip(), "machine": machine(),
              "loadavg": {"before": load_before, "after_costs": load_between, "after": _load(),
                          "per_repeat": {str(row["d"]): row["loadavg"] for row in raw}},
              "ranks": args.ranks, "k": max(1, args.ranks // 2), "rounds": args.rounds,
              "repeats": args.repeats, "per_round": costs,
              "raw_times_s": {str(row["d"]): row["times_s"] for row in raw},
              "recovery": {"d": int(args.kill_d), "killed_rank": args.ranks - 1,
                           "kill_round": kill_at, "jobs": recoveries,
                           "next_s_max": {m: max(j["next_s"] for j in v) for m, v in recoveries.items()},
                           "redone_s_max": {m: max(j["redone_s"] for j in v)
                                            for m, v in recoveries.items()}} if recoveries else None}
    (out / "bench_elastic.json").write_text(json.dumps(result, indent=2) + "\n")
    keys = list(costs[0])
    with open(out / "bench_elastic.csv", "w") as f:
        f.write(",".join(keys) + "\n")
        for row in costs:
            f.write(",".join(f"{row[k]:.6g}" if row[k] is not None else "" for k in keys) + "\n")
    _plot(result, out / "bench_elastic.png")
    m = result["machine"]
    print(f"{m['cpu']}, {m['cores']} cores; load {load_before} -> {result['loadavg']['after']}")
    for row in costs:
        print(f"d={row['d']:>8}: compiled {row['compiled_us']:8.1f} us  elastic "
              f"{row['elastic_us']:8.1f} us (A={row['agree_every_chosen']})  every round "
              f"{row['every_us']:8.1f} us;  elastic/compiled {row['elastic_over_compiled']:.3f} "
              f"[{row['elastic_over_compiled_min']:.3f}, {row['elastic_over_compiled_max']:.3f}]"
              f"  every/compiled {row['every_over_compiled']:.3f} "
              f"[{row['every_over_compiled_min']:.3f}, {row['every_over_compiled_max']:.3f}]")
    for mode, jobs in recoveries.items():
        nexts = ", ".join(f"{1e3 * j['next_s']:.0f} ms" for j in jobs)
        redone = ", ".join(f"{1e3 * j['redone_s']:.0f} ms" for j in jobs)
        back = ", ".join(str(j["rolled_back_to"]) for j in jobs)
        print(f"{mode}: kill -> next completed round {nexts}; killed round redone {redone} "
              f"(rolled back to round {back})")
    print(f"wrote {out / 'bench_elastic.json'}, .csv, .png")
    return 0


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["per_round"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = {"compiled": "plain (compiled)", "elastic": "elastic (interval chosen)",
              "every": "elastic, every round"}
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        for j, row in enumerate(rows):
            ratios = [e / c for e, c in zip(result["raw_times_s"][str(row["d"])][mode],
                                            result["raw_times_s"][str(row["d"])]["compiled"])]
            xs = [j + (i - 1) * width] * len(ratios)
            a.scatter(xs, ratios, s=14, color=f"C{i}", label=labels[mode] if j == 0 else None)
            a.hlines(statistics.median(ratios), j + (i - 1.4) * width, j + (i - 0.6) * width,
                     color=f"C{i}")
    a.axhline(1.05, color="grey", linestyle=":", linewidth=1)
    a.set_xticks(range(len(rows)), [f"d = {row['d']:.0e}" for row in rows])
    a.set_ylabel("time per round / plain run of the same repeat")
    load = result["loadavg"]["before"]
    a.set_title(f"{result['ranks']} ranks, k={result['k']}, {result['rounds']} rounds x "
                f"{result['repeats']}; {result['machine']['cores']} cores, load {load[0]:.1f}",
                fontsize=9)
    a.legend(fontsize=8)
    rec = result.get("recovery")
    if rec:
        for i, (mode, jobs) in enumerate(rec["jobs"].items()):
            xs = [i * (len(jobs) + 1) + k for k in range(len(jobs))]
            b.bar(xs, [1e3 * j["next_s"] for j in jobs], color=f"C{i + 1}",
                  label=f"{labels[mode]}: next round")
            b.scatter(xs, [1e3 * j["redone_s"] for j in jobs], color="k", marker="_", s=200,
                      label="killed round redone" if i == 0 else None)
        b.set_ylabel("ms after the kill")
        b.set_xticks([])
        b.set_title(f"kill -> next completed round (d={rec['d']:.0e})", fontsize=9)
        b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
