"""Do a round's messages on one shared host link finish together or in turn?

    python benchmarks/bench_tc_link_order.py [--rates 50,100,400] [--out benchmarks/results]

On the namespace test bed (jobs/netns-cluster.sh; root), 4 ranks, 2 per host: ranks 0
and 1 (host A) each send a 0.5 MB token to rank 2 and then to rank 3 (host B), in the
transport's pieces and in that order, as a Teleportation holder posts its y_to; ranks 2
and 3 time when both of their inputs are in. All four messages cross host A's link in
one direction (the round's load: four messages' time). If the link served them in turn
(first every message to rank 2, then every message to rank 3), rank 2 would be done at
two messages' time, and could step and send on the idle direction while rank 3 still
waits; if the flows share it, both finish near four. The latency layer's ``hosts:``
model assumes the latter (mpi_teleport/latency/model.py): this measures it, under
Open MPI and MPICH. Writes bench_tc_link_order.json.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_tc_bandwidth as bed  # noqa: E402  (the bed, its rates and its launcher)

ROUND = r'''
import sys, time, numpy as np
from mpi4py import MPI
from mpi_teleport.measure import pieces
comm = MPI.COMM_WORLD; r = comm.rank
nbytes, piece, rounds = (int(a) for a in sys.argv[1:4])
y = np.ones(nbytes // 8); inbox = {s: np.empty_like(y) for s in (0, 1)}
done = []
for t in range(rounds + 2):
    comm.Barrier(); t0 = time.perf_counter()
    if r in (0, 1):
        MPI.Request.Waitall([comm.Isend(v, d, t) for d in (2, 3) for v in pieces(y, piece)])
    else:
        reqs = [comm.Irecv(v, s, t) for s in (0, 1) for v in pieces(inbox[s], piece)]
        MPI.Request.Waitall(reqs)
        if t >= 2:
            done.append(time.perf_counter() - t0)
    comm.Barrier()
got = comm.gather(done, root=0)
if r == 0:
    print({2: float(np.mean(got[2])), 3: float(np.mean(got[3]))})
'''
NBYTES, PIECE, ROUNDS = 500_000, 61440, 12


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50,100,400", help="Mbit/s, comma-separated")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        print("bench_tc_link_order: needs root (namespaces, tc)", file=sys.stderr)
        return 2
    if not bed.bed_up():
        return 2
    rows = []
    try:
        for mbit in (float(r) for r in args.rates.split(",")):
            bed.set_rate(mbit)
            one = NBYTES * 8 / (mbit * 1e6 * bed.TCP_GOODPUT)  # one message alone, at goodput
            for name, python in bed.implementations():
                proc = bed.launch_on_bed(python, 4, ["-c", ROUND, str(NBYTES), str(PIECE), str(ROUNDS)], 300)
                ends = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
                row = {"implementation": name, "rate_mbit": mbit, "message_bytes": NBYTES,
                       "first_destination_s": ends[2], "second_destination_s": ends[3],
                       "one_message_s": one, "first_in_messages": ends[2] / one,
                       "second_in_messages": ends[3] / one}
                rows.append(row)
                print(f"{name:8s} {mbit:5.0f} Mbit/s: rank 2 (sent to first) has its inputs at "
                      f"{row['first_in_messages']:.2f} messages' time, rank 3 at "
                      f"{row['second_in_messages']:.2f} (in turn: 2 and 4; shared: 4 and 4)", flush=True)
    finally:
        bed.set_rate(None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_tc_link_order.json").write_text(json.dumps({
        "what": "when the receivers of four 0.5 MB messages sharing one host link direction "
                "have their inputs, in units of one message's time at TCP goodput",
        "rounds": ROUNDS, "piece_bytes": PIECE, "rows": rows,
        "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()}}, indent=1))
    print(f"bench_tc_link_order: wrote {out}/bench_tc_link_order.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
