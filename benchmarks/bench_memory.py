"""Peak memory per rank and time of one evaluation of the network problems under MPI.

    python benchmarks/bench_memory.py [--out benchmarks/results] [--ranks 4]
                                      [--eval-ranks 1 2 4] [--rounds 20] [--before REF]
                                      [--python PY ...]

A full-size fake Fashion-MNIST (60,000 + 10,000 random images, the real IDX format) is
written to a temporary directory; then

* **memory**: ``mpirun -n R python -m mpi_teleport.run --problem fashion-mnist`` (LeNet-5,
  Teleportation k=2, ``--rounds`` rounds, logging every 10) runs once with this checkout
  and, with ``--before REF``, once with the package as of git commit REF (extracted to a
  temporary folder): every rank reports its peak resident memory (``ru_maxrss``) when the
  run is over, the floor (peak RSS after importing torch and setting it up as the run
  does, before the run), the difference, and its proportional set size at the end.
  With ``--python``, the memory run is repeated with each given interpreter (e.g. one
  whose torch is a CPU-only build; its own ``mpirun`` beside it): a row says which torch
  it ran. Target: at most 40 % of the 1,090 MB per rank measured before the data became
  per-rank.

  Resident set size (RSS, ``ru_maxrss`` is its peak) counts every page a process has
  mapped, shared library pages (torch's) included, in every process that maps them;
  proportional set size (PSS) divides each shared page among the processes that map it,
  so the PSS of the ranks add up to what the machine holds for them.
* **evaluation**: for each number of ranks in ``--eval-ranks``, every rank builds the
  problem as the command line does (``local_nodes=[rank]``) and the MPI back end
  evaluates the averaged model on the 10,000 test images (``MpiBackend.evaluate``: each
  rank its chunk-aligned slice); the median wall time of 3 evaluations, and the CPU time
  of the busiest rank (``time.process_time``), which is what falls as 1/n when the ranks
  have a core each: on an oversubscribed host the wall time cannot fall below the cores'.

Writes ``bench_memory.{csv,json,png}``. CPU only: no GPU was available when this was
written, so there are no GPU rows (none are estimated).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BEFORE_MB = 1090.0  # peak RSS per rank measured before per-rank data
TARGET = 0.40


def write_fake_fashion_mnist(data_dir: Path, n_train=59999, n_test=9999) -> None:
    """Random images and labels in the real IDX format, one sample short of the official
    sizes by default: a file of the official size is checked against the official md5 and
    refused (problems/fashion_files.py), and one sample changes no memory or time figure.
    Where the real files are installed, :func:`fashion_mnist_dir` prefers them."""
    raw = data_dir / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    gen = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        for kind, arr in (("images-idx3-ubyte", gen.integers(0, 256, (n, 28, 28), np.uint8)),
                          ("labels-idx1-ubyte", gen.integers(0, 10, n, np.uint8))):
            head = struct.pack(">I", 0x0800 + arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
            (raw / f"{prefix}-{kind}").write_bytes(head + arr.tobytes())


def fashion_mnist_dir(tmp: Path) -> Path:
    """The real Fashion-MNIST where installed (Debian's dataset-fashion-mnist), else fake
    files of its shapes written under ``tmp``."""
    sys.path.insert(0, str(ROOT))
    from mpi_teleport.measure import fashion_files

    DEBIAN_DIR, locate = fashion_files.DEBIAN_DIR, fashion_files.locate
    if os.path.isdir(DEBIAN_DIR) and locate(DEBIAN_DIR)[1]:
        return Path(DEBIAN_DIR)
    write_fake_fashion_mnist(tmp)
    return tmp


def mpirun(n: int, args: list, env: dict, timeout: int = 1800,
           python: str | None = None) -> subprocess.CompletedProcess:
    sys.path.insert(0, str(ROOT))
    from mpi_teleport.measure import find_mpirun, mpi_env, mpirun_command

    python = python or sys.executable
    cmd = mpirun_command(n, [python, *args], find_mpirun(python))
    return subprocess.run(cmd, env=mpi_env({**os.environ, **env}), capture_output=True,
                          text=True, timeout=timeout)


# ------------------------------------------------------------------------ workers
def worker_train(args) -> None:
    """One rank of the command-line run; its peak RSS goes to <report>/rank<r>.json."""
    from mpi_teleport.measure import run

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    import torch

    import_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from mpi_teleport.measure import models  # torch, set up as the run sets it up: the floor

    models.configure_torch_threads(1)
    floor_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    status = run.main(["--problem", "fashion-mnist", "--data-dir", args.data_dir,
                       "--algorithm", "teleportation", "--k", "2", "--rounds", str(args.rounds),
                       "--log-every", "10", "--lr", "0.01", "--device", "cpu"])
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.report, f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "torch": torch.__version__, "torch_import_mb": import_mb,
         "peak_rss_mb": peak_mb, "torch_floor_mb": floor_mb,
         "above_floor_mb": peak_mb - floor_mb, "pss_end_mb": pss_mb(), "status": status,
         "wall_s": time.perf_counter() - start}))


def pss_mb() -> float | None:
    """Proportional set size now (shared library pages divided among their users)."""
    try:
        for line in open("/proc/self/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def worker_eval(args) -> None:
    """Each rank: the problem as the CLI builds it; rank 0 reports evaluation times."""
    from mpi4py import MPI

    from mpi_teleport.measure import cli, settings as config
    from mpi_teleport.measure import MpiBackend
    from mpi_teleport.measure import fashion_mnist
    from mpi_teleport.measure import Transport

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    problem = fashion_mnist(n, seed=0, data_dir=args.data_dir, local_nodes=[rank])
    cfg = config.resolve({"problem": "fashion-mnist", "data_dir": args.data_dir,
                          "algorithm": "teleportation", "k": 1, "nodes": n}, world_size=n)
    backend = MpiBackend(problem, cli.run_spec(cfg, "teleportation", 1), Transport(comm))
    x = np.tile(problem.initial(), (2, 1)) if rank == 0 else None
    backend.evaluate(problem, x)  # warm-up
    walls, cpus, metrics = [], [], None
    for _ in range(3):
        comm.Barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = backend.evaluate(problem, x)
        cpus.append(time.process_time() - c0)
        comm.Barrier()
        walls.append(time.perf_counter() - t0)
    busiest = comm.gather(statistics.median(cpus), root=0)
    if rank == 0:
        Path(args.report, "eval.json").write_text(json.dumps(
            {"ranks": n, "eval_wall_s": statistics.median(walls), "eval_cpu_s_max_rank": max(busiest),
             "eval_cpu_s_all_ranks": sum(busiest), "test_samples": problem.n_test,
             "loss": metrics["loss"], "accuracy": metrics["accuracy"]}))


# ------------------------------------------------------------------------ driver
def package_at(ref: str, where: Path) -> Path:
    """The repository as of git commit ``ref``, extracted under ``where``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True,
                             check=True).stdout
    where.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def measure_memory(ranks: int, data_dir: Path, rounds: int, code: Path, label: str, tmp: Path,
                   python: str | None = None) -> list:
    report = tmp / f"mem-{label}"
    report.mkdir()
    proc = mpirun(ranks, [str(Path(__file__).resolve()), "--worker", "train", "--data-dir",
                          str(data_dir), "--rounds", str(rounds), "--report", str(report)],
                  env={"PYTHONPATH": str(code)}, timeout=3600, python=python)
    if proc.returncode != 0:
        raise SystemExit(f"{label}: mpirun failed\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(p.read_text()) for p in sorted(report.glob("rank*.json"))]
    return [{"kind": "memory", "code": label, "ranks": ranks, **r} for r in rows]


def measure_eval(ranks: int, data_dir: Path, tmp: Path) -> dict:
    report = tmp / f"eval-{ranks}"
    report.mkdir()
    proc = mpirun(ranks, [str(Path(__file__).resolve()), "--worker", "eval", "--data-dir",
                          str(data_dir), "--report", str(report)], env={"PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"eval {ranks}: mpirun failed\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return {"kind": "evaluation", **json.loads((report / "eval.json").read_text())}


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    mem = [r for r in rows if r["kind"] == "memory"]
    labels = sorted({r["code"] for r in mem}, key=lambda c: c != "before")
    for i, label in enumerate(labels):
        got = [r for r in mem if r["code"] == label]
        xs = [i * (len(got) + 1) + j for j in range(len(got))]
        torch_version = got[0].get("torch") or "torch ?"
        bars = a.bar(xs, [r["peak_rss_mb"] for r in got], label=f"{label} ({torch_version}): peak RSS")
        a.bar(xs, [r["pss_end_mb"] or 0 for r in got], color="none", hatch="//",
              edgecolor="black", label="PSS at the end" if i == 0 else None)
        a.hlines(max(r["torch_floor_mb"] for r in got), xs[0] - 0.4, xs[-1] + 0.4,
                 colors=bars.patches[0].get_facecolor(), linestyles="-.", linewidth=2,
                 label="torch floor (import + set-up)" if i == 0 else None)
    a.axhline(BEFORE_MB, color="grey", ls=":", label=f"{BEFORE_MB:.0f} MB (before)")
    a.axhline(TARGET * BEFORE_MB, color="red", ls="--", label=f"target {TARGET:.0%}")
    a.set_ylabel("peak RSS per rank (MB)")
    a.set_title("Fashion-MNIST full size, LeNet-5, 4 ranks: a bar per rank", fontsize=9)
    a.legend(fontsize=8)
    ev = sorted((r for r in rows if r["kind"] == "evaluation"), key=lambda r: r["ranks"])
    n = [r["ranks"] for r in ev]
    b.plot(n, [r["eval_wall_s"] for r in ev], "o-", label="wall (median of 3)")
    b.plot(n, [r["eval_cpu_s_max_rank"] for r in ev], "s-", label="CPU, busiest rank")
    b.set_xlabel("ranks")
    b.set_ylabel("seconds per evaluation (10,000 images)")
    b.set_xticks(n)
    b.set_title("shared evaluation (CPU only; no GPU)")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=["train", "eval"])
    parser.add_argument("--data-dir")
    parser.add_argument("--report")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--eval-ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--before", help="git commit to measure the memory of, for comparison")
    parser.add_argument("--python", nargs="+", default=[],
                        help="more interpreters (another torch build) to measure this checkout with")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    if args.worker == "train":
        worker_train(args)
        return 0
    if args.worker == "eval":
        worker_eval(args)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    try:
        data = tmp / "data"
        write_fake_fashion_mnist(data)
        rows = []
        if args.before:
            old = package_at(args.before, tmp / "before")
            rows += measure_memory(args.ranks, data, args.rounds, old, "before", tmp)
        rows += measure_memory(args.ranks, data, args.rounds, ROOT, "after", tmp)
        for i, python in enumerate(args.python):
            rows += measure_memory(args.ranks, data, args.rounds, ROOT, f"after-python{i + 1}",
                                   tmp, python)
        for n in args.eval_ranks:
            rows.append(measure_eval(n, data, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    codes = sorted({r["code"] for r in rows if r["kind"] == "memory"}, key=lambda c: c != "before")
    builds = {}
    for code in codes:
        got = [r for r in rows if r["kind"] == "memory" and r["code"] == code]
        peak = max(r["peak_rss_mb"] for r in got)
        builds[code] = {"torch": got[0].get("torch"), "peak_rss_mb_max_rank": peak,
                        "fraction_of_before": peak / BEFORE_MB,
                        "pass": peak <= TARGET * BEFORE_MB,
                        "torch_import_mb_max_rank": max((r.get("torch_import_mb") or 0) for r in got) or None,
                        "torch_floor_mb_max_rank": max(r["torch_floor_mb"] for r in got),
                        "above_floor_mb_max_rank": max(r["above_floor_mb"] for r in got),
                        "pss_end_mb_max_rank": max(r["pss_end_mb"] or 0 for r in got),
                        "pss_end_mb_sum_ranks": sum(r["pss_end_mb"] or 0 for r in got)}
    summary = {"before_mb": BEFORE_MB, "target_fraction": TARGET,
               "target_mb": TARGET * BEFORE_MB, "by_code": builds,
               "note": "the target is peak RSS per rank (ru_maxrss); RSS counts torch's shared "
                       "library pages in every rank, PSS divides them among the ranks (the sum "
                       "of PSS is what the machine holds); torch_floor_mb: peak RSS after "
                       "importing torch and setting it up as the run does, before the run",
               "gpu": "none: no GPU was available; no GPU rows (not estimated)",
               "host": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r})
    with open(out / "bench_memory.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    (out / "bench_memory.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    plot(rows, out / "bench_memory.png")
    for r in rows:
        print(r)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
