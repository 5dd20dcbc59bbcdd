"""A real bandwidth-bound network against the latency layer's ``bw:`` model.

    python benchmarks/bench_tc_bandwidth.py [--quick] [--out benchmarks/results]

Runs on the two-host namespace test bed (jobs/netns-cluster.sh; root; started here if it
is not up): every host's link is limited with ``tc`` (token bucket, both directions) to
RATE Mbit/s, and the quadratic problem with a large dimension d (messages of 8 d bytes)
runs over MPI with ranks on both hosts, under Open MPI and under MPICH (when
``.venv-mpich`` exists; tests/launch_helpers.py makes it). Each run also carries
``--latency bw:RATE/1000 --clock virtual``: the latency layer's virtual clock adds, per
message, bytes * 8 / RATE to the measured compute time and delays nothing, so one run
gives both numbers of a round: the measured real time (``time_s``) and the model's
prediction (``virtual_time_s``).

Configurations: DSGD with 2 ranks (one per host: one message each way per round over
its own link), DSGD with 4 ranks on a ring 0-1-2-3-0 (two per host: two messages share
each host's link, which the model, with independent links, does not know), and
Teleportation with 4 ranks and k = 2 (tokens hop between hosts in some rounds only).

``--openmpi-eager``: Open MPI only, with its TCP eager limit raised to 1 MiB (messages up
to 1 MiB go without the rendezvous handshake whose small control messages otherwise queue
behind the other direction's data on a rate-limited link); writes
bench_tc_bandwidth_openmpi_eager.*.

Writes bench_tc_bandwidth{,_quick}.csv (one row per run), .json (settings, machine) and
.png (measured vs predicted seconds per round) into --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mpi_teleport.launch import find_mpirun, mpi_env, mpirun_command  # noqa: E402
from mpi_teleport.front.mpi_flavor import flavor_of_launcher  # noqa: E402
from mpi_teleport.disk.output import read_jsonl  # noqa: E402

BED = ["bash", str(ROOT / "jobs" / "netns-cluster.sh")]
AGENT = str(ROOT / "jobs" / "netns-rsh")
HOSTS = ["10.231.77.1", "10.231.77.2"]
CONFIGS = {  # name -> (ranks, flags)
    "dsgd-2": (2, ["--algorithm", "dsgd", "--topology", "ring"]),
    "dsgd-4-ring": (4, ["--algorithm", "dsgd", "--topology", "ring"]),
    "teleportation-4-k2": (4, ["--algorithm", "teleportation", "--k", "2", "--topology", "ring"]),
}


EAGER_1MIB = {"OMPI_MCA_btl_tcp_eager_limit": "1048576", "OMPI_MCA_btl_tcp_rndv_eager_limit": "1048576",
              "OMPI_MCA_btl_tcp_max_send_size": "1048576"}


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


def one_run(python: str, ranks: int, flags: list[str], dim: int, rounds: int, mbit: float,
            timeout: float) -> dict:
    """Measured and predicted seconds per round (mean over rounds 1..T: round 0 and the
    first logged interval include start-up, so the first interval is left out)."""
    mpirun = find_mpirun(python)
    flavor = flavor_of_launcher(mpirun)
    with tempfile.TemporaryDirectory(prefix="bench-tc-") as tmp:
        env = mpi_env(flavor=flavor)
        env["PYTHONPATH"] = str(ROOT)
        env["OMP_NUM_THREADS"] = "1"
        env.setdefault("UCX_TLS", "tcp,self")  # MPICH's UCX would use shared memory between the hosts
        per_host = ranks // len(HOSTS)
        cmd = mpirun_command(ranks, [python, "-m", "mpi_teleport.run", *flags, "--nodes", str(ranks),
                                     "--dim", str(dim), "--rounds", str(rounds), "--log-every",
                                     str(rounds // 4), "--latency", f"bw:{mbit / 1000}", "--clock",
                                     "virtual", "--progress", "off", "--out", tmp],
                             mpirun, flavor, hosts=",".join(f"{h}:{per_host}" for h in HOSTS),
                             rsh_agent=AGENT, env=env)
        start = time.monotonic()
        proc = subprocess.run([*BED, "exec", "mtp-h0", *cmd], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:3])}...: status {proc.returncode}: {proc.stderr[-1500:]}")
        rows = read_jsonl(Path(tmp) / "metrics.jsonl")
    first, last = rows[1], rows[-1]  # rounds T/4 .. T
    span = last["round"] - first["round"]
    return {"measured_s_per_round": (last["time_s"] - first["time_s"]) / span,
            "predicted_s_per_round": (last["virtual_time_s"] - first["virtual_time_s"]) / span,
            "launch_wall_s": round(wall, 2), "implementation": flavor.name}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r["config"] for r in rows))
    fig, axes = plt.subplots(1, len(configs), figsize=(5 * len(configs), 4.2), squeeze=False)
    for ax, config in zip(axes[0], configs):
        for (impl, dim), marker in zip(sorted({(r["implementation"], r["dim"]) for r in rows}), "osD^v<>"):
            got = sorted((r["rate_mbit"], r["measured_s_per_round"], r["predicted_s_per_round"]) for r in rows
                         if r["config"] == config and r["implementation"] == impl and r["dim"] == dim)
            if not got:
                continue
            rate, measured, predicted = zip(*got)
            line = ax.plot(rate, measured, marker=marker, label=f"{impl}, {8 * dim / 1e6:.1f} MB measured")[0]
            ax.plot(rate, predicted, marker=marker, linestyle="--", color=line.get_color(), alpha=0.6,
                    label=f"{impl}, {8 * dim / 1e6:.1f} MB bw: model")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tc link rate (Mbit/s)")
        ax.set_ylabel("seconds per round")
        ax.set_title(config)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("tc-limited links between two namespace hosts: measured vs the bw: model")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


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
    args = parser.parse_args(argv)
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        print("bench_tc_bandwidth: needs root (namespaces, tc)", file=sys.stderr)
        return 2
    if not bed_up():
        return 2
    rates = [100.0] if args.quick else [float(r) for r in args.rates.split(",")]
    dims = [62500] if args.quick else [int(d) for d in args.dims.split(",")]
    configs = {"dsgd-2": CONFIGS["dsgd-2"]} if args.quick else CONFIGS
    rows = []
    try:
        for mbit in rates:
            set_rate(mbit)
            for dim in dims:
                for name, python in implementations(args.openmpi_eager):
                    for config, (ranks, flags) in configs.items():
                        got = one_run(python, ranks, flags, dim, args.rounds, mbit, args.timeout)
                        if args.openmpi_eager:
                            got["implementation"] += "+eager1MiB"
                        row = {"config": config, "ranks": ranks, "dim": dim, "message_bytes": 8 * dim,
                               "rate_mbit": mbit, **got,
                               "measured_over_predicted": got["measured_s_per_round"] / got["predicted_s_per_round"]}
                        rows.append(row)
                        print(f"{name:8s} {config:20s} d={dim:7d} {mbit:5.0f} Mbit/s: measured "
                              f"{row['measured_s_per_round']:.4f} s/round, model {row['predicted_s_per_round']:.4f}"
                              f" (x{row['measured_over_predicted']:.2f})", flush=True)
    finally:
        set_rate(None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "bench_tc_bandwidth" + ("_quick" if args.quick else "") + ("_openmpi_eager" if args.openmpi_eager else "")
    with open(out / f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / f"{stem}.json").write_text(json.dumps({
        "what": "seconds per round over tc-limited links (2 namespace hosts) vs the latency layer's "
                "bw: model (virtual clock: measured compute + bytes * 8 / rate per message)",
        "rounds": args.rounds, "rates_mbit": rates,
        "openmpi_env": EAGER_1MIB if args.openmpi_eager else {}, "dims": dims, "configs": {k: v[1] for k, v in configs.items()},
        "tc": "tbf rate RATE burst 64kb latency 200ms on both ends of every host's veth",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_at_end": os.getloadavg()},
        "rows": rows}, indent=1))
    plot(rows, out / f"{stem}.png")
    print(f"bench_tc_bandwidth: wrote {out}/{stem}.{{csv,json,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
