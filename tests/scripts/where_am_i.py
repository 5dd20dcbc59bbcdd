"""Each rank reports where it runs (tests of the multi-host test bed): hostname, MPI's
processor name, its rank among the ranks of its host (a shared-memory split, what the GPU
mapping uses), and a message from its ring neighbour (on another host for some ranks)."""
import json
import socket
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
local = comm.Split_type(MPI.COMM_TYPE_SHARED)
send = np.full(1 << 18, comm.rank, dtype=np.float64)  # 2 MiB: more than one TCP segment
recv = np.empty_like(send)
comm.Sendrecv(send, dest=(comm.rank + 1) % comm.size, recvbuf=recv, source=(comm.rank - 1) % comm.size)
facts = {"rank": comm.rank, "hostname": socket.gethostname(), "processor": MPI.Get_processor_name(),
         "local_rank": local.rank, "local_size": local.size, "from_left": float(recv[0]),
         "intact": bool((recv == recv[0]).all())}
everything = comm.gather(facts)
if comm.rank == 0:
    json.dump(everything, sys.stdout)
