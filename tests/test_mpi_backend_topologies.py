"""The MPI back end equals the simulator bit for bit on every topology, k from 1 to n, with
and without momentum, for Algorithm 3 (overlap), Algorithm 1 (simple) and DSGD: n back ends
in n threads of this process over the loopback transport of tests/test_backend_threads.py.

These rows ran under mpirun (tests/test_mpi.py, seven settings x two variants x two MPI
implementations, ~30 launches of 4-11 ranks); the transport is not what they vary, so they
run here in seconds. Under mpirun one end-to-end run per algorithm and variant and MPI
implementation stays (tests/test_mpi.py::test_mpi_variants_and_simulator_bit_identical),
with the transport's own semantics in tests/in_rank/.
"""
from __future__ import annotations

import numpy as np
import pytest

from mpi_teleport.core.spec import RunSpec

from test_backend_threads import run_simulator, run_threads

SETTINGS = {  # tests/test_mpi.py's former CASES: (n, k, topology, seed, momentum, lr)
    "ring k=1": (5, 1, "ring", 0, 0.0, 0.05),
    "base2 k=n prime n": (7, 7, "base2", 1, 0.0, 0.05),
    "onepeer-exp momentum": (8, 3, "onepeer-exp", 2, 0.9, 0.05),
    "exp momentum": (6, 4, "exp", 3, 0.5, 0.05),
    "torus": (9, 6, "torus", 4, 0.0, 0.05),
    "complete": (4, 2, "complete", 5, 0.0, 0.05),
    "base2 n=11": (11, 5, "base2", 6, 0.9, 0.005),
}
RUNS = {  # what one `mpi_teleport.run --algorithm compare` plus `--variant simple` ran
    "alg3": dict(algorithm="teleportation", variant="overlap"),
    "alg1": dict(algorithm="teleportation", variant="simple"),
    "dsgd": dict(algorithm="dsgd"),
}


@pytest.mark.parametrize("run", sorted(RUNS))
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_mpi_backend_equals_the_simulator_on_every_topology(setting, run):
    n, k, topology, seed, momentum, lr = SETTINGS[setting]
    spec = RunSpec(nodes=n, k=None if run == "dsgd" else k, rounds=30, lr=lr, momentum=momentum,
                   topology=topology, seed=seed, **RUNS[run])
    got, want = run_threads(spec, 6), run_simulator(spec, 6)
    assert len(got) == len(want) == 1
    assert sorted(got[0]) == sorted(want[0])
    for key in want[0]:
        assert np.array_equal(got[0][key], want[0][key]), (setting, run, key)
