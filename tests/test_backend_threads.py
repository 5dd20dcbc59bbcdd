"""The MPI back end's compiled fast path (blocks of rounds planned ahead, records shared
by pattern, buffer swaps tracked by parity) equals the simulator bit for bit, across many
block boundaries, without MPI: n back ends run in n threads of this process over a
loopback transport whose persistent channels are queues (tests/loopback.py; serial tier,
seconds).

MPI itself is exercised by tests/test_mpi.py and the in-rank suites; this file reaches
what short MPI runs do not: block boundaries every few rounds, momentum swaps carried
across blocks, both phases of Algorithm 2, records reused and rebuilt.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from mpi_teleport.runtime.backends import compiled, mpi as mpi_backend
from mpi_teleport.runtime.backends.local import LocalBackend
from mpi_teleport.runtime.backends.mpi import MpiBackend
from mpi_teleport.core.optimizers import Adam
from mpi_teleport.problems.quadratic import quadratic
from mpi_teleport.core.spec import RunSpec

from loopback import WAIT_S, Hub, Loopback, serialised  # the thread-ranks' transport (tests/loopback.py)


def run_threads(spec: RunSpec, dim: int) -> list[dict]:
    """Every phase of ``spec`` on n thread-ranks: per phase, {token of run q: x} as
    (run, token) -> vector."""
    n = spec.nodes
    hub = Hub(n)
    problems = [quadratic(n, seed=3, dim=dim, sigma2=1.0, zeta2=1.0) for _ in range(n)]
    backends = [MpiBackend(problems[r], spec, Loopback(hub, r)) for r in range(n)]
    assert all(b.compiled for b in backends)
    x0 = problems[0].initial()
    phases = [serialised(phase) for phase in spec.phases()]
    results: list[list] = [[None] * len(phases) for _ in range(n)]
    errors: list = []

    def rank_main(r: int) -> None:
        try:
            b = backends[r]
            for index, phase in enumerate(phases):
                b.begin(phase, phase.start, x0)
                for t in range(phase.start, phase.stop):
                    b.step(t)
                results[r][index] = (b.held, b.state.x.copy())
        except Exception as exc:  # reported by the main thread
            errors.append((r, repr(exc)))

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=WAIT_S * 4)
    assert not errors, errors
    assert not any(th.is_alive() for th in threads), "a thread-rank is stuck"
    out = []
    for index in range(len(phases)):
        tokens = {}
        for r in range(n):
            (run, m), x = results[r][index]
            if m >= 0:
                assert (run, m) not in tokens, f"token {(run, m)} held twice"
                tokens[(run, m)] = x
        out.append(tokens)
    return out


def run_simulator(spec: RunSpec, dim: int) -> list[dict]:
    problem = quadratic(spec.nodes, seed=3, dim=dim, sigma2=1.0, zeta2=1.0)
    sim = LocalBackend(problem, spec)
    x0 = problem.initial()
    out = []
    for phase in spec.phases():
        sim.begin(phase, phase.start, x0)
        for t in range(phase.start, phase.stop):
            sim.step(t)
        out.append({(q, m): sim.tokens(q)[m] for q in range(len(sim.xs))
                    for m in range(len(sim.xs[q]))})
    return out


CASES = {
    "alg3 k<n momentum": dict(algorithm="teleportation", nodes=7, k=3, momentum=0.9),
    "alg1 k<n momentum": dict(algorithm="teleportation", nodes=7, k=3, momentum=0.9,
                              variant="simple"),
    "alg3 k=n": dict(algorithm="teleportation", nodes=5, k=5),
    "alg1 k=1": dict(algorithm="teleportation", nodes=4, k=1, variant="simple", momentum=0.5),
    "alg3 k=1 momentum": dict(algorithm="teleportation", nodes=4, k=1, momentum=0.5),
    "two nodes": dict(algorithm="teleportation", nodes=2, k=2, momentum=0.9),
    "dsgd base2": dict(algorithm="dsgd", nodes=6, k=None, topology="base2", momentum=0.9),
    "alg2 search": dict(algorithm="search", nodes=7, k=None, momentum=0.9),
    "alg2 search simple": dict(algorithm="search", nodes=7, k=None, variant="simple"),
    "onepeer-exp sparse": dict(algorithm="teleportation", nodes=12, k=2, topology="onepeer-exp",
                               variant="simple", momentum=0.9),
    # Adam's two moments travel as momentum does (issue 30; mpi_teleport/DESIGN.md §2.6)
    "alg3 adamw": dict(algorithm="teleportation", nodes=7, k=3,
                       optimizer=Adam((0.8, 0.99), 1e-6, 0.1, True)),
    "alg1 adam": dict(algorithm="teleportation", nodes=7, k=3, variant="simple",
                      optimizer=Adam(weight_decay=0.01)),
    "dsgd adam": dict(algorithm="dsgd", nodes=6, k=None, topology="base2", optimizer=Adam()),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("block_rounds", [1, 7])
def test_compiled_rounds_equal_the_simulator_across_blocks(monkeypatch, name, block_rounds):
    monkeypatch.setattr(mpi_backend, "BLOCK_ROUNDS", block_rounds)
    settings = dict(CASES[name])
    spec = RunSpec(rounds=31, lr=0.05, seed=11, **settings)
    dim = 6
    got, want = run_threads(spec, dim), run_simulator(spec, dim)
    assert len(got) == len(want)
    for phase_got, phase_want in zip(got, want):
        assert sorted(phase_got) == sorted(phase_want)
        for key in phase_want:
            assert np.array_equal(phase_got[key], phase_want[key]), (name, key)


def test_records_are_rebuilt_when_the_cache_is_full(monkeypatch):
    """A run with more distinct round patterns than records kept still computes the same
    numbers (records are rebuilt, not reused wrongly)."""
    monkeypatch.setattr(mpi_backend, "BLOCK_ROUNDS", 5)
    monkeypatch.setattr(compiled, "RECORDS_KEPT", 3)
    spec = RunSpec("teleportation", 7, 3, 40, 0.05, momentum=0.9, seed=5)
    got, want = run_threads(spec, 5), run_simulator(spec, 5)
    for key in want[0]:
        assert np.array_equal(got[0][key], want[0][key])
