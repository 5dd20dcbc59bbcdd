"""The price of elastic mode (issue 23): per-round time against the plain mode, and the
time from a killed rank to the next completed round.

    python benchmarks/bench_elastic.py [--quick] [--ranks 4] [--ds 1e2 1e4 1e5]
                                       [--rounds 300] [--out benchmarks/results]

The script launches itself under ``mpirun`` (``--worker``); inside, one process per rank
drives the engine (:func:`mpi_teleport.runtime.engine.execute`) on the paper's quadratic problem
(Teleportation, Alg. 3, k = ranks // 2, ring, lr 0.01, momentum 0.5, logging at the first
and last round only) with three back ends on the same rounds:

* ``compiled`` -- the plain default: :class:`~mpi_teleport.runtime.backends.mpi.MpiBackend` with
  the compiled rounds (persistent channels);
* ``canonical`` -- the same back end held to the round executor
  (:mod:`mpi_teleport.core.algorithms.teleport`, per-round Isend/Irecv): what elastic mode runs;
* ``elastic`` -- :class:`~mpi_teleport.runtime.backends.elastic.ElasticBackend`: the round
  executor plus, every round, the copy of the held token (x and momentum) and an
  MPI_Comm_agree over the ranks;
* ``spaced`` -- the same with ``--agree-every A`` (``--agree-every``, default 8): the copy
  and the agreement every A rounds only (issue 32).

The three are timed in one job under ``mpirun --with-ft ulfm`` (ULFM on for all, so the
comparison isolates what elastic mode adds), in turns, ``--repeats`` times; per-round time
= the run's ``time_s`` at its last round (logging excluded) / rounds, median over the
repeats. Then, for the recovery time, jobs of the elastic mode in which rank ``ranks - 1``
SIGKILLs itself at the start of round ``rounds // 2`` (the tests' hook,
``MPI_TELEPORT_TEST_DIE``): each survivor notes when it entered that round and when the
round was agreed complete after the recovery (detection, agreement, shrink, restore,
placement, the redone round); the largest over the survivors is the time from the kill to
the next completed round (the kill comes within microseconds of the dying rank's entry).

Writes bench_elastic.csv, bench_elastic.json and bench_elastic.png into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


AGREE_EVERY = 8  # (--agree-every: the "spaced" back end's)


def _spec(n: int, rounds: int):
    from mpi_teleport.core.spec import RunSpec

    return RunSpec("teleportation", n, max(1, n // 2), rounds, 0.01, 0.5, "ring", "overlap", 0)


def _run(backend_name: str, comm, d: int, rounds: int, probe=None) -> float:
    """One run on this rank; its seconds per round (rank 0's record, shared)."""
    from mpi_teleport.runtime import engine
    from mpi_teleport.runtime.backends.elastic import ElasticBackend
    from mpi_teleport.runtime.backends.mpi import MpiBackend
    from mpi_teleport.runtime.metrics import Recorder
    from mpi_teleport.disk.output import RunFiles
    from mpi_teleport.problem import with_defaults
    from mpi_teleport.problems.quadratic import Quadratic
    from mpi_teleport.core.spec import Logging
    from mpi_teleport.front.runner import RunSettings
    from mpi_teleport.runtime.transport import ElasticTransport, Transport

    n = comm.Get_size()
    spec, logging = _spec(n, rounds), Logging(every=rounds)
    problem = with_defaults(Quadratic(n=n, d=d, sigma2=10.0, zeta2=10.0, seed=0))
    if backend_name in ("elastic", "spaced"):
        transport = ElasticTransport(comm)
        backend = ElasticBackend(problem, spec, transport,
                                 agree_every=AGREE_EVERY if backend_name == "spaced" else 1)
    else:
        transport = Transport.duplicate(comm)
        backend = MpiBackend(problem, spec, transport, compiled=backend_name == "compiled")
    if probe is not None:
        probe(backend)
    recorder = Recorder(spec, logging, problem, RunFiles(None))
    result = engine.execute(problem, RunSettings(spec, logging), backend, recorder)
    backend.close()
    if backend_name not in ("elastic", "spaced") or transport.living == list(range(n)):
        transport.free()
    return result.records[-1]["time_s"] / rounds


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    rows = []
    if args.kill_at is None:  # per-round cost: the three back ends in turns
        for d in args.ds:
            d = int(d)
            times = {name: [] for name in ("compiled", "canonical", "elastic", "spaced")}
            for rep in range(args.repeats):
                names = list(times)
                names = names[rep % 4:] + names[:rep % 4]
                for name in names:
                    times[name].append(_run(name, comm, d, args.rounds))
            rows.append({"d": d, **{f"{name}_us": 1e6 * statistics.median(v)
                                    for name, v in times.items()}})
    else:  # recovery: this job loses rank n - 1 at round kill_at
        marks = {}

        def probe(backend):
            keep, settle = backend.keep, backend.settle

            def timed_keep(r):
                if r == args.kill_at and "enter" not in marks:
                    marks["enter"] = time.perf_counter()
                keep(r)

            def timed_settle(r, ok=True):
                agreed = settle(r, ok)
                if r == args.kill_at and agreed and "done" not in marks:
                    marks["done"] = time.perf_counter()
                return agreed

            backend.keep, backend.settle = timed_keep, timed_settle

        _run("elastic", comm, int(args.ds[0]), args.rounds, probe)
        # every survivor writes its own; the launcher takes the largest
        Path(f"{args.worker_out}.{rank}").write_text(json.dumps(marks["done"] - marks["enter"]))
    if args.kill_at is None and rank == 0:
        Path(args.worker_out).write_text(json.dumps(rows))
    sys.stdout.flush()
    os._exit(0)  # (after a loss MPI_Finalize may wait for the dead)


def _launch(args, extra: list[str], env: dict | None = None) -> list[dict]:
    from mpi_teleport.launch import mpi_env, mpirun_command

    out = Path(args.out) / f".bench_elastic_worker_{os.getpid()}.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--worker-out", str(out),
            "--rounds", str(args.rounds), "--repeats", str(args.repeats),
            "--ds", *[str(d) for d in args.ds], "--agree-every", str(args.agree_every),
            *extra, "--elastic"]  # (--elastic: ULFM on)
    cmd = mpirun_command(args.ranks, argv)
    subprocess.run(cmd, env={**mpi_env(), "PYTHONPATH": str(ROOT), **(env or {})},
                   timeout=args.timeout, check=False, cwd=ROOT)
    if "--kill-at" in extra:  # the survivors' times
        parts = sorted(out.parent.glob(out.name + ".*"))
        took = [json.loads(p.read_text()) for p in parts]
        for p in parts:
            p.unlink()
        return [{"recovery_s": max(took), "survivors": len(took)}]
    rows = json.loads(out.read_text())
    out.unlink()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="d in {1e2, 1e4}, 100 rounds, 2 repeats")
    parser.add_argument("--ranks", type=int, default=4, help="MPI ranks = nodes (default 4)")
    parser.add_argument("--ds", type=float, nargs="+", default=None, help="token sizes d")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per run (default 300)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per back end (default 3)")
    parser.add_argument("--kills", type=int, default=3, help="recovery jobs (default 3)")
    parser.add_argument("--agree-every", type=int, default=8,
                        help="the spaced back end's agreement interval (default 8)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    parser.add_argument("--kill-at", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--elastic", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.ds = args.ds or ([1e2, 1e4] if args.quick else [1e2, 1e4, 1e5])
    args.rounds = args.rounds or (100 if args.quick else 300)
    args.repeats = args.repeats or (2 if args.quick else 3)
    global AGREE_EVERY
    AGREE_EVERY = args.agree_every
    if args.worker:
        return worker(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load = os.getloadavg()
    costs = _launch(args, [])
    kill_at = args.rounds // 2
    recoveries = []
    for _ in range(args.kills):
        rows = _launch(argparse.Namespace(**{**vars(args), "ds": [1e4]}), ["--kill-at", str(kill_at)],
                       {"MPI_TELEPORT_TEST_DIE": f"{args.ranks - 1}@{kill_at}"})
        recoveries.append(rows[0]["recovery_s"])
    for row in costs:
        row["elastic_over_compiled"] = row["elastic_us"] / row["compiled_us"]
        row["elastic_over_canonical"] = row["elastic_us"] / row["canonical_us"]
        row["elastic_minus_canonical_us"] = row["elastic_us"] - row["canonical_us"]
        row["spaced_over_compiled"] = row["spaced_us"] / row["compiled_us"]
    result = {"started": started, "loadavg_at_start": load, "ranks": args.ranks,
              "agree_every": args.agree_every,
              "k": max(1, args.ranks // 2), "rounds": args.rounds, "repeats": args.repeats,
              "per_round": costs, "recovery_s": recoveries, "recovery_d": 10000,
              "recovery_median_s": statistics.median(recoveries)}
    (out / "bench_elastic.json").write_text(json.dumps(result, indent=2) + "\n")
    keys = list(costs[0])
    with open(out / "bench_elastic.csv", "w") as f:
        f.write(",".join(keys) + "\n")
        for row in costs:
            f.write(",".join(f"{row[k]:.6g}" for k in keys) + "\n")
    _plot(result, out / "bench_elastic.png")
    for row in costs:
        print(f"d={row['d']:>8}: compiled {row['compiled_us']:8.1f} us  canonical "
              f"{row['canonical_us']:8.1f} us  elastic {row['elastic_us']:8.1f}  spaced "
              f"{row['spaced_us']:8.1f} us/round")
    print(f"kill -> next completed round: {', '.join(f'{s * 1e3:.0f} ms' for s in recoveries)}")
    print(f"wrote {out / 'bench_elastic.json'}, .csv, .png")
    return 0


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["per_round"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    ds = [r["d"] for r in rows]
    for name in ("compiled", "canonical", "elastic", "spaced"):
        label = f"elastic, --agree-every {result.get('agree_every', 8)}" if name == "spaced" else name
        a.plot(ds, [r[f"{name}_us"] for r in rows], marker="o", label=label)
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("d (float64 elements per token)")
    a.set_ylabel("time per round (us)")
    a.set_title(f"{result['ranks']} ranks, k={result['k']}, Alg. 3")
    a.legend()
    rec = [1e3 * s for s in result["recovery_s"]]
    b.bar(range(len(rec)), rec)
    b.set_xlabel("job")
    b.set_ylabel("ms")
    b.set_title(f"kill -> next completed round (d={result['recovery_d']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
