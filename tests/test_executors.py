"""The round executor (algorithms/teleport.py: the paper's Algorithms 1 and 3 line by
line, per-round messages) and the compiled rounds (backends/compiled.py: persistent
channels, records shared by pattern, buffer swaps by parity) compute the same tokens as
the simulator, bit for bit, after every round: every topology, k = 1, k = n, DSGD, both
variants, both phases of Algorithm 2, with and without momentum, across block
boundaries. n MpiBackends run in n threads over a loopback transport (tests/loopback.py),
without MPI; serial tier, seconds."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from loopback import WAIT_S, Hub, Loopback, serialised
from mpi_teleport.core import rng, topology as topo
from mpi_teleport.runtime.backends import mpi as mpi_backend
from mpi_teleport.runtime.backends.local import LocalBackend
from mpi_teleport.runtime.backends.mpi import MpiBackend
from mpi_teleport.problems.quadratic import Quadratic, quadratic
from mpi_teleport.core.spec import RunSpec

DIM = 5


def problem(n: int):
    return quadratic(n, seed=3, dim=DIM, sigma2=1.0, zeta2=1.0)


def trace_ranks(spec: RunSpec, compiled: bool, piece_elements: int = 0) -> dict:
    """{(r, run, token): x} for every round r of every phase (its first included), read
    from the token's holder after round r - 1, with n thread-ranks (channels cut into
    pieces of ``piece_elements``, 0: whole)."""
    n = spec.nodes
    hub = Hub(n)
    backends = [MpiBackend(problem(n), spec, Loopback(hub, r, piece_elements), compiled=compiled)
                for r in range(n)]
    assert all(b.compiled == compiled for b in backends)
    x0 = problem(n).initial()
    phases = [serialised(phase) for phase in spec.phases()]
    traces: list[dict] = [{} for _ in range(n)]
    errors: list = []

    def rank_main(rank: int) -> None:
        b, trace = backends[rank], traces[rank]
        try:
            for phase in phases:
                b.begin(phase, phase.start, x0)
                for r in range(phase.start, phase.stop + 1):
                    if r > phase.start:
                        b.step(r - 1)
                    run, m = b.held
                    if m >= 0:
                        trace[(r, phase.fresh, run, m)] = b.state.x.copy()
            b.close()
        except Exception as exc:  # reported by the main thread
            errors.append((rank, repr(exc)))

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=WAIT_S * 4)
    assert not errors, errors
    assert not any(th.is_alive() for th in threads), "a thread-rank is stuck"
    out: dict = {}
    for trace in traces:
        for key, x in trace.items():
            assert key not in out, f"token {key} held twice"
            out[key] = x
    return out


def trace_simulator(spec: RunSpec) -> dict:
    sim = LocalBackend(problem(spec.nodes), spec)
    x0 = problem(spec.nodes).initial()
    out = {}
    for phase in spec.phases():
        sim.begin(phase, phase.start, x0)
        for r in range(phase.start, phase.stop + 1):
            if r > phase.start:
                sim.step(r - 1)
            for q, x in enumerate(sim.xs):
                for m in range(len(x)):
                    out[(r, phase.fresh, q, m)] = x[m].copy()
    return out


def assert_same(got: dict, want: dict, what: str) -> None:
    assert sorted(got) == sorted(want), what
    for key in want:
        assert np.array_equal(got[key], want[key]), (what, key)


CASES = {f"{top} {variant}": dict(algorithm="teleportation", nodes=7, k=4, topology=top,
                                   variant=variant, momentum=0.9)
         for top in topo.TOPOLOGIES for variant in ("overlap", "simple")}
CASES.update({
    "k=1 overlap": dict(algorithm="teleportation", nodes=4, k=1, momentum=0.5),
    "k=1 simple": dict(algorithm="teleportation", nodes=4, k=1, variant="simple"),
    "k=n overlap": dict(algorithm="teleportation", nodes=5, k=5, topology="base2"),
    "k=n simple": dict(algorithm="teleportation", nodes=5, k=5, variant="simple", momentum=0.9),
    "two nodes": dict(algorithm="teleportation", nodes=2, k=2, momentum=0.9),
    "one node": dict(algorithm="teleportation", nodes=1, k=1, momentum=0.9),
    "dsgd ring": dict(algorithm="dsgd", nodes=6, k=None, momentum=0.9),
    "dsgd onepeer-exp": dict(algorithm="dsgd", nodes=6, k=None, topology="onepeer-exp"),
    "alg2 overlap": dict(algorithm="search", nodes=7, k=None, momentum=0.9),
    "alg2 simple": dict(algorithm="search", nodes=7, k=None, variant="simple", momentum=0.9),
    "sparse onepeer-exp": dict(algorithm="teleportation", nodes=12, k=2,
                               topology="onepeer-exp", variant="simple"),
})


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_executor_and_compiled_rounds_equal_the_simulator(monkeypatch, name):
    monkeypatch.setattr(mpi_backend, "BLOCK_ROUNDS", 7)  # many block boundaries
    spec = RunSpec(rounds=17, lr=0.05, seed=11, **CASES[name])
    want = trace_simulator(spec)
    canonical = trace_ranks(spec, compiled=False)
    assert_same(canonical, want, f"round executor, {name}")
    assert_same(trace_ranks(spec, compiled=True), canonical, f"compiled rounds, {name}")


@pytest.mark.parametrize("name", ["dsgd ring", "ring overlap", "k=1 overlap", "ring simple",
                                  "k=1 simple"])
def test_noise_drawn_while_waiting_changes_no_token(monkeypatch, name):
    """Under Algorithm 3 a rank that steps in round t + 1 draws that round's gradient noise
    while round t's messages travel, under Algorithm 1 while its token's model travels to
    it (Quadratic.prepare through transport.meanwhile): the loopback lets one block be
    drawn there, the step draws the rest (blocks of 2 pairs here, so both happen). The
    tokens stay the simulator's; no draw is made twice."""
    monkeypatch.setattr(mpi_backend, "BLOCK_ROUNDS", 7)
    monkeypatch.setattr(rng, "NORMAL_BLOCK", 2)
    prepared: list = []
    prepare = Quadratic.prepare

    def counted(self, nodes, t):
        prepared.append((tuple(nodes), t))
        return prepare(self, nodes, t)

    monkeypatch.setattr(Quadratic, "prepare", counted)
    spec = RunSpec(rounds=17, lr=0.05, seed=11, **CASES[name])
    want = trace_simulator(spec)
    assert not prepared  # the simulator draws in the step
    for compiled in (False, True):
        prepared.clear()
        assert_same(trace_ranks(spec, compiled=compiled), want, f"{name}, compiled={compiled}")
        # drawn ahead by the steppers of rounds 1 .. stop (the last one never stepped: a
        # draw a run may leave unused) that wait for messages before it (a token that stays
        # with its holder moves nothing: nothing to wait for); under DSGD every node, every
        # round
        steps = sum(len(h) for phase in spec.phases()
                    for t in range(phase.start + 1, phase.stop + 1) for h in phase.roster(t))
        assert len(set(prepared)) == len(prepared) and 0 < len(prepared) <= steps
        if spec.algorithm == "dsgd":
            assert len(prepared) == steps, (len(prepared), steps)


def test_user_topology():
    def alternating(k, t):  # the identity on even rounds, J/k on odd ones
        return np.eye(k) if t % 2 == 0 else np.full((k, k), 1.0 / k)

    for variant in ("overlap", "simple"):
        spec = RunSpec("teleportation", 6, 4, 9, 0.05, momentum=0.9, topology=alternating,
                       variant=variant, seed=2)
        canonical = trace_ranks(spec, compiled=False)
        assert_same(canonical, trace_simulator(spec), variant)
        assert_same(trace_ranks(spec, compiled=True), canonical, variant)


PIPELINED = ["k=1 overlap", "k=n simple", "dsgd ring", "alg2 overlap", "alg2 simple",
             "sparse onepeer-exp"] + [f"{top} {variant}" for top in ("base2", "complete")
                                      for variant in ("overlap", "simple")]


@pytest.mark.parametrize("by_columns", [True, False], ids=["step-and-sum", "sum-only"])
@pytest.mark.parametrize("name", PIPELINED)
def test_pipelined_compiled_rounds_equal_the_simulator(monkeypatch, name, by_columns):
    """Channels in pieces of 2 elements (the last short) and blocks of one piece: the step
    is computed a block of columns at a time, each block's pieces sent after it, and the
    sum adds a block as soon as its pieces are in (sum-only: a problem whose gradient is
    not element-wise steps whole); the tokens are the simulator's, bit for bit."""
    from mpi_teleport.runtime.backends import compiled as compiled_module

    monkeypatch.setattr(mpi_backend, "BLOCK_ROUNDS", 7)
    monkeypatch.setattr(compiled_module.CompiledRounds, "column_block_bytes", 8)
    calls = {"columns": 0, "sums": 0}
    step_columns, weighted = compiled_module.local_step_columns, compiled_module.weighted_sum

    def counted_step(*args, **kwargs):
        calls["columns"] += 1
        return step_columns(*args, **kwargs)

    def counted_sum(weights, inputs, out, work):
        calls["sums"] += out.size < DIM  # a block of the sum, not the whole
        return weighted(weights, inputs, out, work)

    monkeypatch.setattr(compiled_module, "local_step_columns", counted_step)
    monkeypatch.setattr(compiled_module, "weighted_sum", counted_sum)
    if not by_columns:
        monkeypatch.setattr(compiled_module, "steps_by_columns", lambda problem, rule: False)
    spec = RunSpec(rounds=17, lr=0.05, seed=11, **CASES[name])
    assert_same(trace_ranks(spec, compiled=True, piece_elements=2), trace_simulator(spec),
                f"pipelined compiled rounds, {name}")
    assert calls["sums"] > 0
    assert (calls["columns"] > 0) == by_columns
