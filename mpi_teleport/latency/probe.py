"""Real-clock micro-benchmark of the latency layer (an MPI entry point).

    mpirun -n 3 python -m mpi_teleport.latency probe --latency matrix:d.csv --reps 50
"""
from __future__ import annotations

import sys
import time

import numpy as np

from ..errors import UsageError
from ..parsers import OneLineParser, add_version
from .layer import LatencyTransport
from .model import parse_spec


def probe(argv=None) -> int:
    """Real-clock micro-benchmark, run under mpirun: rank 0 exchanges one message with
    every other rank (each posts right after a barrier). Prints per repetition every
    rank's exchange time (until all its receives completed and all its sends went out)
    and each message's visibility delay (receive time minus the post time carried in the
    message; one host, one monotonic clock).

        mpirun -n 3 python -m mpi_teleport.latency probe --latency matrix:d.csv --reps 50
    """
    import json

    from mpi4py import MPI

    from ..runtime.transport import KIND_Y, Transport

    parser = OneLineParser(prog="python -m mpi_teleport.latency probe")
    add_version(parser)
    parser.add_argument("--latency", required=True)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--dim", type=int, default=50)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        model = parse_spec(args.latency, size)
    except UsageError as exc:
        if rank == 0:
            print(f"probe: error: {exc}", file=sys.stderr)
        return 2
    tr = LatencyTransport(Transport(comm), model, "real")
    peers = range(1, size) if rank == 0 else [0]
    inbox = {p: np.zeros(args.dim) for p in peers}
    out = np.zeros(args.dim)
    for rep in range(args.reps):
        tag = tr.tag(rep, KIND_Y)
        tr.barrier()
        pendings = {p: tr.post_recvs([(p, tag, inbox[p])]) for p in peers}
        start = time.perf_counter()
        out[0] = start
        sends = tr.post_sends([(p, tag, out) for p in peers])
        seen = {}
        for p in sorted(peers, key=lambda p: model.delay_us(p, rank, out.nbytes)):
            tr.wait(pendings[p])
            seen[p] = time.perf_counter()
        tr.wait(sends)
        tr.flush()  # the exchange is over when its last send has gone out too
        done = time.perf_counter()
        rows = comm.gather({"rank": rank, "exchange_s": done - start,
                            "visible_s": {p: seen[p] - inbox[p][0] for p in peers}}, root=0)
        if rank == 0:
            print(json.dumps({"rep": rep, "ranks": rows}), flush=True)
    tr.barrier()
    return 0


