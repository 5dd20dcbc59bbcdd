"""The price of hot spares: per-round time of an elastic run with S waiting
spares against plain elastic mode, the spares' CPU time while they wait, and the time
from a killed node to the next completed round when a spare takes it over (the spare's
data shard included) against the same loss without a spare.

    python benchmarks/bench_spares.py [--quick] [--ranks 4] [--spares 2] [--rounds 400]
                                      [--out benchmarks/results]

Every figure comes from whole jobs of the command line (``python -m mpi_teleport.run
--elastic [--spares S]`` under ``mpirun --with-ft ulfm``, through the launcher), on two
problems: the paper's quadratic (d = 1e4, float64) and LeNet-5 on Fashion-MNIST (the real
files where Debian's dataset-fashion-mnist is installed, else fake data of the real shapes
in the real on-disk format, ``bench_memory.fashion_mnist_dir``; the first 500 test samples,
``lenet_data``; CPU, batch 32).

* **Per round**: ``time_s`` of the last record (logging excluded) / rounds, median over
  ``--repeats`` jobs of each kind, the kinds in turns: ``elastic`` (n ranks) and
  ``spares`` (n + S ranks, none used).
* **Spare CPU**: each spare writes its wait's wall and CPU time
  (``MPI_TELEPORT_SPARE_LOG``, :mod:`mpi_teleport.elastic.spares`).
* **Kill to next round**: node ``n - 1`` SIGKILLs itself at the start of round ``r``
  (the tests' hook ``MPI_TELEPORT_TEST_DIE``), before round r's record. The survivors
  run round r, fail its agreement, recover and record round r again (the record made
  before the loss is replaced), so with ``--log-every 1`` ``time_s(r) - time_s(r - 1)``
  is round r - 1 plus the recovery (detection, agreement, re-forming the job, the spare
  building node n - 1's problem, restore, placement) plus the lost attempt at round r;
  one median round is subtracted. Jobs with
  one spare (a replacement) and with none (a loss: the survivors go on without a replacement).

Writes bench_spares.csv, bench_spares.json and bench_spares.png into --out. Run it on an
otherwise idle machine: a loaded one makes the per-round figures meaningless.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def problem_flags(name: str, data_dir: str, quick: bool) -> list[str]:
    if name == "quadratic":
        return ["--problem", "quadratic", "--dim", "10000", "--lr", "0.01"]
    return ["--problem", "fashion-mnist", "--data-dir", data_dir, "--lr", "0.05",
            "--batch-size", "32", "--device", "cpu", "--progress", "off",
            "--alpha", "0.5"]


def job(ranks: int, flags: list[str], out: Path, env: dict | None = None,
        timeout: float = 900) -> list[dict]:
    """One job of the command line; its records."""
    from mpi_teleport.measure import mpi_env, mpirun_command

    argv = [sys.executable, "-m", "mpi_teleport.run", *flags, "--out", str(out)]
    res = subprocess.run(mpirun_command(ranks, argv),
                         env={**mpi_env(), "PYTHONPATH": str(ROOT), **(env or {})},
                         cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"bench_spares: a job failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return [json.loads(line) for line in open(out / "metrics.jsonl") if line.strip()]


def per_round(args, name: str, data_dir: str, work: Path) -> dict:
    base = ["--algorithm", "teleportation", "--k", str(max(1, args.ranks // 2)), "--elastic",
            "--rounds", str(args.rounds), "--log-every", str(args.rounds),
            *problem_flags(name, data_dir, args.quick)]
    times = {"elastic": [], "spares": []}
    cpu = []
    for rep in range(args.repeats):
        kinds = ["elastic", "spares"] if rep % 2 == 0 else ["spares", "elastic"]
        for kind in kinds:
            out = work / f"{name}-{kind}-{rep}"
            spares = args.spares if kind == "spares" else 0
            log = work / f"{name}-cpu-{rep}"
            recs = job(args.ranks + spares, [*base, "--spares", str(spares)], out,
                       {"MPI_TELEPORT_SPARE_LOG": str(log)})
            times[kind].append(recs[-1]["time_s"] / args.rounds)
            if spares:
                deadline = time.monotonic() + 20
                while len(list(log.glob("spare-*.json"))) < spares and time.monotonic() < deadline:
                    time.sleep(0.1)
                cpu += [json.loads(p.read_text()) for p in log.glob("spare-*.json")]
    row = {"problem": name, **{f"{k}_ms": 1e3 * statistics.median(v) for k, v in times.items()},
           **{f"{k}_all_ms": [1e3 * x for x in v] for k, v in times.items()}}
    row["spares_over_elastic"] = row["spares_ms"] / row["elastic_ms"]
    row["spare_cpu_s"] = max(c["cpu_s"] for c in cpu)
    row["spare_wait_s"] = statistics.median(c["wait_s"] for c in cpu)
    return row


def recovery(args, name: str, data_dir: str, work: Path, spares: int, rep: int,
             round_s: float) -> float:
    r = args.rounds // 2
    flags = ["--algorithm", "teleportation", "--k", str(max(1, args.ranks // 2)), "--elastic",
             "--rounds", str(args.rounds), "--log-every", "1", "--spares", str(spares),
             *problem_flags(name, data_dir, args.quick)]
    out = work / f"{name}-kill-{spares}-{rep}"
    recs = job(args.ranks + spares, flags, out,
               {"MPI_TELEPORT_TEST_DIE": f"{args.ranks - 1}@{r}"})
    at = {rec["round"]: rec["time_s"] for rec in recs}
    return at[r] - at[r - 1] - round_s


TEST_SAMPLES = 500  # the test set of the LeNet jobs (see lenet_data)


def lenet_data(folder: Path) -> Path:
    """A flat Fashion-MNIST folder: the training files of the real set where installed
    (else fake ones of the real shapes, bench_memory.fashion_mnist_dir), linked, and the
    first TEST_SAMPLES test samples: the kill jobs log every round, and evaluating the whole
    test set there would dwarf the rounds and the recovery being measured (a round and a
    recovery do not depend on the test set; the spare builds the full training shard)."""
    import gzip

    from bench_memory import fashion_mnist_dir

    source = fashion_mnist_dir(folder / "source")
    folder.mkdir(parents=True, exist_ok=True)

    def find(stem: str) -> Path:
        for path in (source / stem, source / f"{stem}.gz", source / "FashionMNIST" / "raw" / stem,
                     source / "FashionMNIST" / "raw" / f"{stem}.gz"):
            if path.exists():
                return path
        raise SystemExit(f"bench_spares: {stem} not found in {source}")

    for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        path = find(stem)
        (folder / path.name).symlink_to(path)
    for stem, row_bytes in (("t10k-images-idx3-ubyte", 28 * 28), ("t10k-labels-idx1-ubyte", 1)):
        path = find(stem)
        data = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
        head = 16 if "images" in stem else 8
        count = TEST_SAMPLES.to_bytes(4, "big")
        (folder / stem).write_bytes(data[:4] + count + data[8:head] + data[head:head + TEST_SAMPLES * row_bytes])
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    parser.add_argument("--ranks", type=int, default=4, help="nodes n (default 4)")
    parser.add_argument("--spares", type=int, default=2, help="waiting spares S (default 2)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per job (default 400)")
    parser.add_argument("--repeats", type=int, default=None, help="jobs per kind (default 3)")
    parser.add_argument("--kills", type=int, default=3, help="kill jobs per kind (default 3)")
    parser.add_argument("--problems", nargs="+", default=["quadratic", "lenet"])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (60 if args.quick else 400)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.quick:
        args.kills = min(args.kills, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work, data_dir = Path(tmp), str(Path(tmp) / "data")
        if "lenet" in args.problems:
            data_dir = str(lenet_data(work / "data"))
        for name in args.problems:
            row = per_round(args, name, data_dir, work)
            round_s = row["elastic_ms"] / 1e3
            for spares, key in ((1, "replaced"), (0, "lost")):
                took = [recovery(args, name, data_dir, work, spares, rep, round_s)
                        for rep in range(args.kills)]
                row[f"kill_{key}_ms"] = 1e3 * statistics.median(took)
                row[f"kill_{key}_all_ms"] = [1e3 * t for t in took]
            rows.append(row)
    result = {"started": started, "loadavg_at_start": load, "ranks": args.ranks,
              "spares": args.spares, "k": max(1, args.ranks // 2), "rounds": args.rounds,
              "repeats": args.repeats, "rows": rows}
    (out / "bench_spares.json").write_text(json.dumps(result, indent=2) + "\n")
    keys = [k for k in rows[0] if not k.endswith("_all_ms")]
    with open(out / "bench_spares.csv", "w") as f:
        f.write(",".join(keys) + "\n")
        for row in rows:
            f.write(",".join(str(row[k]) if isinstance(row[k], str) else f"{row[k]:.6g}"
                             for k in keys) + "\n")
    _plot(result, out / "bench_spares.png")
    for row in rows:
        print(f"{row['problem']:>9}: elastic {row['elastic_ms']:.3f} ms/round, with "
              f"{args.spares} spares {row['spares_ms']:.3f} ({row['spares_over_elastic']:.2f}x); "
              f"spare CPU {row['spare_cpu_s']:.3f} s in {row['spare_wait_s']:.1f} s; kill -> next "
              f"round: replaced {row['kill_replaced_ms']:.0f} ms, lost {row['kill_lost_ms']:.0f} ms")
    print(f"wrote {out / 'bench_spares.json'}, .csv, .png")
    return 0


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    names = [r["problem"] for r in rows]
    x = list(range(len(rows)))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    ratio = [r["spares_over_elastic"] for r in rows]
    bars = a.bar(x, ratio, 0.5)
    for bar, r in zip(bars, rows):
        a.annotate(f"{r['elastic_ms']:.2f} -> {r['spares_ms']:.2f} ms", (bar.get_x() + 0.25,
                   bar.get_height()), ha="center", va="bottom", fontsize=9)
    a.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    a.set_xticks(x, names)
    a.set_ylim(0, max(1.3, max(ratio) * 1.2))
    a.set_ylabel(f"time per round, {result['spares']} spares waiting / none")
    a.set_title(f"{result['ranks']} nodes, k={result['k']}, Alg. 3, elastic mode")
    b.bar([i - 0.2 for i in x], [r["kill_replaced_ms"] for r in rows], 0.4,
          label="replaced by a spare")
    b.bar([i + 0.2 for i in x], [r["kill_lost_ms"] for r in rows], 0.4, label="lost (no spare)")
    b.set_xticks(x, names)
    b.set_ylabel("kill -> next completed round, minus a round (ms)")
    b.set_title("recovery (median of the kill jobs)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
