"""Latency layer, serial part: spec parsing and validation (table-driven), the delay
model, configuration, and the virtual-time oracle against hand-computed critical paths.
The MPI side (real delays, virtual clocks over MPI) is tests/test_latency_mpi.py."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from mpi_teleport import latency
from mpi_teleport.core import schedule
from mpi_teleport.front.cli import run_spec
from mpi_teleport.latency.model import LatencySettings
from mpi_teleport.latency.virtual_clock import for_run
from mpi_teleport.session.settings import UsageError, resolve
from mpi_teleport.session.preflight import load
from mpi_teleport.session.prepare import check_job
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main

RING4 = [[0, 1000, 0, 500],  # 4-node ring: links 0-1 1 ms, 1-2 3 ms, 2-3 2 ms, 3-0 0.5 ms
         [1000, 0, 3000, 0],
         [0, 3000, 0, 2000],
         [500, 0, 2000, 0]]
TRIANGLE = [[0, 1000, 3000],  # node 0's neighbours at 1 ms and 3 ms
            [1000, 0, 500],
            [3000, 500, 0]]


def write_csv(path, rows):
    path.write_text("\n".join(",".join(str(v) for v in row) for row in rows) + "\n")
    return str(path)


# ---------------------------------------------------------------- parsing
VALID = [  # spec, kind, value_us, bw_gbps
    ("none", "none", 0.0, None),
    ("  none ", "none", 0.0, None),
    ("const:250", "const", 250.0, None),
    ("const:0", "const", 0.0, None),
    ("mod:5", "mod", 5.0, None),
    ("MOD:2.5", "mod", 2.5, None),
    ("mod:0", "mod", 0.0, None),
    ("mod:5,bw:10", "mod", 5.0, 10.0),
    ("const:1e3, bw:0.5", "const", 1000.0, 0.5),
    ("bw:1", "none", 0.0, 1.0),
    ("none,bw:25", "none", 0.0, 25.0),
    ("bw:1,hosts:5", "none", 0.0, 1.0),
    ("hosts:5,bw:1", "none", 0.0, 1.0),
    ("mod:5, bw:2, hosts:3+20+2", "mod", 5.0, 2.0),
    ("bw:2,hosts:auto", "none", 0.0, 2.0),
]


@pytest.mark.parametrize("spec,kind,value,bw", VALID)
def test_valid_specs(spec, kind, value, bw):
    m = latency.parse_spec(spec, 25)
    assert (m.kind, m.value_us, m.bw_gbps) == (kind, value, bw)
    assert m.active == (kind != "none" or bw is not None)


INVALID = [  # spec, part of the message
    ("", "empty"),
    ("foo:1", "unknown model 'foo'"),
    ("tau:5", "unknown model 'tau'"),
    ("mod", "give the value"),
    ("mod:", "give the value"),
    ("const", "give the value"),
    ("mod:-1", ">= 0"),
    ("const:-0.5", ">= 0"),
    ("mod:nan", "finite"),
    ("const:inf", "finite"),
    ("mod:abc", "must be a number"),
    ("mod:5,bw:0", "> 0"),
    ("mod:5,bw:-1", "> 0"),
    ("mod:5,bw:nan", "finite"),
    ("mod:5,bw:fast", "must be a number"),
    ("mod:5,bw:1,bw:2", "once"),
    ("none:3", "takes no value"),
    ("matrix:", "give the CSV file"),
    ("matrix:/nonexistent/delays.csv", "not found"),
    ("mod:5,hosts:2", "give bw: too"),
    ("bw:1,hosts:0", "whole numbers >= 1"),
    ("bw:1,hosts:", "whole numbers >= 1"),
    ("bw:1,hosts:2.5", "whole numbers >= 1"),
    ("bw:1,hosts:2+x", "whole numbers >= 1"),
    ("bw:1,hosts:1+2", "the sizes must add up to 4"),
    ("bw:1,hosts:2,hosts:2", "once"),
]


@pytest.mark.parametrize("spec,message", INVALID)
def test_invalid_specs_say_what_is_wrong(spec, message):
    with pytest.raises(UsageError) as err:
        latency.parse_spec(spec, 4)
    text = str(err.value)
    assert message in text and "\n" not in text and text.startswith("--latency")


MATRICES = [  # rows, n, part of the message (None: valid)
    (RING4, 4, None),
    ([[0, 1, 2], [3, 0, 4]], 2, "not square"),
    ([[0, 1, 2], [3, 0, 4], [5, 6, 0]], 4, "there are 4 nodes"),
    ([[0, "nan"], [1, 0]], 2, "non-finite entry at row 0, column 1"),
    ([[0, 1], ["inf", 0]], 2, "non-finite entry at row 1, column 0"),
    ([[0, -3], [1, 0]], 2, "negative delay -3"),
    ([[0, "x"], [1, 0]], 2, "not a numeric CSV"),
    ([[0, 1, 2]], 1, "not square"),
]


@pytest.mark.parametrize("rows,n,message", MATRICES)
def test_matrix_validation(tmp_path, rows, n, message):
    spec = "matrix:" + write_csv(tmp_path / "d.csv", rows)
    if message is None:
        m = latency.parse_spec(spec, n)
        assert m.kind == "matrix" and m.matrix_us.shape == (n, n)
        return
    with pytest.raises(UsageError) as err:
        latency.parse_spec(spec, n)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_matrix_path_may_contain_commas_and_take_bandwidth(tmp_path):
    path = write_csv(tmp_path / "a,b.csv", [[0, 7], [9, 0]])
    m = latency.parse_spec(f"matrix:{path},bw:4", 2)
    assert m.kind == "matrix" and m.bw_gbps == 4.0
    assert m.delay_us(0, 1, 0) == 7.0 and m.delay_us(1, 0, 0) == 9.0  # row = sender


# ---------------------------------------------------------------- the model
def test_mod_is_the_papers_heterogeneous_network():
    m = latency.parse_spec("mod:5")
    cases = {(0, 1): 5, (1, 0): 5, (3, 10): 35, (0, 23): 115, (0, 24): 0, (24, 0): 0,
             (2, 2): 0, (0, 25): 5}
    for (i, j), us in cases.items():
        assert m.delay_us(i, j, 400) == us
    # the paper's ring i -> i+1 (mod 25): every link costs tau, the wrap-around 24 -> 0 is free
    ring = [m.delay_us(i, (i + 1) % 25, 400) for i in range(25)]
    assert ring == [5.0] * 24 + [0.0]


def test_self_messages_are_free_and_vectorised_equals_scalar(tmp_path):
    specs = ["const:250", "mod:3,bw:2", "bw:0.01", "matrix:" + write_csv(tmp_path / "d.csv", RING4)]
    i, j = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    for spec in specs:
        m = latency.parse_spec(spec, 4)
        vec = m.delay_us(i, j, 400)
        assert all(m.delay_us(a, a, 400) == 0.0 for a in range(4))
        assert (np.diag(vec) == 0).all()
        for a in range(4):
            for b in range(4):
                assert vec[a, b] == m.delay_us(a, b, 400)  # exactly: same float operations


def test_bandwidth_term():
    m = latency.parse_spec("const:10,bw:8")  # 8 Gbit/s = 1 byte per ns
    assert m.delay_us(0, 1, 1000) == pytest.approx(10 + 1.0)
    assert m.delay_us(0, 1, 0) == 10.0
    assert latency.parse_spec("bw:8").delay_us(0, 1, 8000) == pytest.approx(8.0)


# ---------------------------------------------------------------- shared host links (hosts:)
# bw:0.008 is 1 us per byte: every bandwidth time below is its byte count in microseconds.
def test_hosts_spec_places_ranks_in_blocks(tmp_path):
    m = latency.parse_spec("bw:0.008,hosts:2", 6)
    assert m.hosts and m.us_per_byte == 1.0
    assert m.host_of(np.arange(6)).tolist() == [0, 0, 1, 1, 2, 2]
    m = latency.parse_spec("bw:0.008,hosts:1+3+2", 6)
    assert m.host_of(np.arange(6)).tolist() == [0, 1, 1, 1, 2, 2]
    assert not latency.parse_spec("bw:0.008", 6).hosts  # no grouping: links per pair, as before
    path = write_csv(tmp_path / "a,b.csv", [[0, 7], [9, 0]])
    m = latency.parse_spec(f"matrix:{path},bw:4,hosts:1", 2)
    assert (m.kind, m.bw_gbps, m.host_sizes) == ("matrix", 4.0, (1,))


def test_hosts_auto_takes_the_placement_under_mpi_only(tmp_path):
    m = latency.parse_spec("bw:0.008,hosts:auto", 4)
    assert m.hosts and m.host_auto
    with pytest.raises(ValueError, match="under MPI only"):
        m.host_of(0)
    # round-robin placement (ranks 0, 2 on host 0; 1, 3 on host 1): not blocks
    p = m.placed([0, 1, 0, 1])
    assert p.host_of(np.arange(4)).tolist() == [0, 1, 0, 1] and not p.host_auto
    links = p.host_links(np.array([0, 1, 2]), np.array([2, 3, 1]), 1000, 4)  # 0->2 stays home
    assert links.out_bytes.tolist() == [1000.0, 0.0] and links.in_bytes.tolist() == [0.0, 1000.0]
    assert [p.delay_us(i, j, 1000, links) for i, j in ((0, 2), (1, 3), (2, 1))] == [0.0, 0.0, 1000.0]
    # the simulator has no placement: refused, saying what to give instead
    with pytest.raises(UsageError, match="hosts:R"):
        oracle(tmp_path, 4, "bw:0.008,hosts:auto", 0.0)


def wire(spec, n, sends, nbytes=1000):
    """{(i, j): bandwidth microseconds} of the messages ``sends`` leaving together."""
    m = latency.parse_spec(spec, n)
    src, dst = np.array([s for s, _ in sends]), np.array([d for _, d in sends])
    links = m.host_links(src, dst, nbytes, n)
    return {(i, j): m.delay_us(i, j, nbytes, links) for i, j in sends}


def test_two_ranks_sharing_a_host_link_take_twice_as_long_as_one():
    one = wire("bw:0.008,hosts:2", 4, [(0, 2)])
    assert one == {(0, 2): 1000.0}
    assert wire("bw:0.008,hosts:2", 4, [(0, 2), (1, 3)]) == {(0, 2): 2000.0, (1, 3): 2000.0}
    # the same through the receiving host's link: 0 and 2 on their own hosts, 3 and 4 share
    assert wire("bw:0.008,hosts:1+1+2", 4, [(0, 2), (1, 3)]) == {(0, 2): 2000.0, (1, 3): 2000.0}
    # links are full duplex: opposite directions do not share
    assert wire("bw:0.008,hosts:2", 4, [(0, 2), (3, 1)]) == {(0, 2): 1000.0, (3, 1): 1000.0}
    # a message takes the busier of its two links: 0's link carries 2 messages, 1's one
    assert wire("bw:0.008,hosts:1+1+2", 4, [(0, 1), (0, 2), (3, 2)]) == {
        (0, 1): 2000.0, (0, 2): 2000.0, (3, 2): 0.0}


def test_a_message_within_a_host_costs_no_bandwidth_time():
    assert wire("bw:0.008,hosts:2", 4, [(0, 1), (2, 3)]) == {(0, 1): 0.0, (2, 3): 0.0}
    # and does not load the host link of a message that crosses it
    assert wire("const:50,bw:0.008,hosts:2", 4, [(0, 1), (1, 2)]) == {(0, 1): 50.0, (1, 2): 1050.0}
    assert wire("bw:0.008,hosts:4", 4, [(0, 1), (1, 2), (3, 0)]) == {(0, 1): 0.0, (1, 2): 0.0,
                                                                      (3, 0): 0.0}


def test_hosts_of_one_rank_share_a_ranks_own_link():
    """hosts:1: a rank's sends to two neighbours share its one link (the old model, without
    hosts:, gives every pair of ranks its own link)."""
    sends = [(0, 1), (0, 3)]
    assert wire("bw:0.008,hosts:1", 4, sends) == {(0, 1): 2000.0, (0, 3): 2000.0}
    m = latency.parse_spec("bw:0.008", 4)
    assert [m.delay_us(i, j, 1000) for i, j in sends] == [1000.0, 1000.0]


def test_host_links_vectorised_equals_scalar_and_alone_is_one_message():
    m = latency.parse_spec("mod:3,bw:0.5,hosts:2", 6)
    i, j = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    links = m.host_links(i, j, 800, 6)  # everyone to everyone: 4 of 6 messages per rank cross
    assert links.out_bytes.tolist() == links.in_bytes.tolist() == [8 * 800.0] * 3
    vec = m.delay_us(i, j, 800, links)
    for a in range(6):
        for b in range(6):
            assert vec[a, b] == m.delay_us(a, b, 800, links)  # exactly: same float operations
    # no loads given (a message outside the rounds): it is alone on its links
    assert m.delay_us(0, 2, 800) == m.delay_us(0, 2, 800, m.host_links([0], [2], 800, 6))


def test_oracle_dsgd_ring_with_two_ranks_per_host(tmp_path):
    """DSGD ring 0-1-2-3-0, hosts {0, 1} and {2, 3}: the messages 1 -> 2 and 0 -> 3 share
    host 0's link out (and 2 -> 1, 3 -> 0 host 1's): every round costs compute + two
    messages' bandwidth time. One rank per host: each rank's two sends share its link, the
    same. All on one host: compute only. Without hosts: one message per round."""
    nbytes = 8 * 125  # dim 125, float64: 1000 bytes = 1000 us at bw:0.008
    expected = {"bw:0.008,hosts:2": 2100.0, "bw:0.008,hosts:1": 2100.0, "bw:0.008,hosts:4": 100.0,
                "bw:0.008": 1100.0}
    for spec, per_round in expected.items():
        o = oracle(tmp_path, 4, spec, 100.0, dim=125)
        assert o.nbytes == nbytes
        for r in (1, 2, 3):
            o.advance_to(r)
            assert o.clock.tolist() == [r * per_round] * 4, spec


def test_oracle_teleportation_counts_the_tokens_that_cross_hosts(tmp_path):
    """k = 1, Alg. 3 on 4 ranks, hosts {0, 1}, {2, 3}: a round costs compute, plus the hop
    when the token changes host (one message: alone on its links), plus the momentum
    that travels with it (a second message over the same links: twice the time)."""
    n, c, rounds = 4, 7.0, 30
    h = [int(schedule.holders(3, n, 1, t)[0]) for t in range(rounds + 1)]
    for momentum, per_hop in ((0.0, 1000.0), (0.5, 2000.0)):
        o = oracle(tmp_path, n, "bw:0.008,hosts:2", c, algorithm="teleportation", k=1,
                   variant="overlap", seed=3, dim=125, momentum=momentum)
        o.advance_to(rounds)
        expected = 0.0
        for t in range(rounds):
            expected += c + (per_hop if h[t] // 2 != h[t + 1] // 2 else 0.0)
        assert o.clock.max() == expected
    assert any(h[t] // 2 != h[t + 1] // 2 for t in range(rounds))  # (some hops cross)
    assert any(h[t] != h[t + 1] and h[t] // 2 == h[t + 1] // 2 for t in range(rounds))


def test_oracle_alg1_fetch_carries_model_and_momentum(tmp_path):
    """Alg. 1, k = 1: the fetch moves x and v (two messages) over the host links, then a
    lone token gossips with nobody: a crossing fetch costs 2 x 1000 us with momentum."""
    n, c, rounds = 4, 7.0, 30
    h = [int(schedule.holders(3, n, 1, t)[0]) for t in range(rounds + 1)]
    for momentum, per_hop in ((0.0, 1000.0), (0.5, 2000.0)):
        o = oracle(tmp_path, n, "bw:0.008,hosts:2", c, algorithm="teleportation", k=1,
                   variant="simple", seed=3, dim=125, momentum=momentum)
        o.advance_to(rounds)
        expected = 0.0
        for t in range(rounds):
            hop = t > 0 and h[t - 1] // 2 != h[t] // 2
            expected += (per_hop if hop else 0.0) + c
        assert o.clock.max() == expected


def test_oracle_a_link_carries_one_round_after_the_other(tmp_path):
    """Teleportation k = 2 (Alg. 3) on hosts {0, 1}, {2, 3}, 1000 us a message, 100 us a
    step; seed 3's holders: round 0 nodes 0 and 1 (host 0), round 1 nodes 1 and 3, round
    2 nodes 3 and 1. Round 0: both tokens' y go 0 -> 3 and 1 -> 3 over host 0's link
    out (two messages: 100 + 2000 = 2100 at node 3); node 1 gets 0's y from its own host
    at 100. Round 1: node 1 steps (200) and sends 1 -> 3, but host 0's link carries round
    0's two messages until 2100: it leaves then and arrives at 3100 (before: 1200, as if
    the link were free, and node 3 at its own step's 2200). 3 -> 1 leaves at 2200 over
    host 1's link out, free: 3200."""
    o = oracle(tmp_path, 4, "bw:0.008,hosts:2", 100.0, algorithm="teleportation", k=2,
               variant="overlap", seed=3, dim=125, topology="ring")
    assert [o.phases[0].roster(t)[0].tolist() for t in range(3)] == [[0, 1], [1, 3], [3, 1]]
    o.advance_to(1)
    assert o.clock.tolist() == [100.0, 100.0, 0.0, 2100.0]
    o.advance_to(2)
    assert o.clock.tolist() == [100.0, 3200.0, 0.0, 3100.0]


def test_oracle_teleportation_takes_the_round_by_round_bound_of_its_links(tmp_path):
    """Teleportation k = 2 over 2 + 2 ranks, no compute time: each round's messages wait
    for the links' earlier rounds, so over 60 rounds the virtual time is the sum of each
    round's busiest host link, in one direction (its bytes over the rate: the wire
    benchmark's physical bound); it was 8 % under it while a link could carry two
    rounds at once. DSGD's even rounds were equal to it either way."""
    from mpi_teleport.core.interfaces import KIND_Y
    from mpi_teleport.latency.virtual_clock import round_links, round_plan

    for algorithm, k in (("teleportation", 2), ("dsgd", None)):
        o = oracle(tmp_path, 4, "bw:0.008,hosts:2", 0.0, algorithm=algorithm, k=k,
                   topology="ring", dim=125)
        o.advance_to(60)
        bound = 0.0
        for phase in o.phases:
            for t in range(phase.start, min(60, phase.stop)):
                msgs = round_plan(phase, t, o.topology, o.variant, o.momentum)
                links = round_links(o.model, msgs, o.variant, o.momentum, o.nbytes, 4)[KIND_Y]
                bound += max(links.out_bytes.max(), links.in_bytes.max())  # 1 us per byte
        assert o.clock.max() == bound, algorithm


def test_simulator_refuses_a_view_of_host_links_that_memory_cannot_hold(tmp_path, capsys):
    """Every simulated node keeps its view of every host link (2 floats a host): 20,000
    hosts of one rank would need 6 GiB; refused in one line, before anything is built."""
    assert sim_main(["--nodes", "20000", "--k", "2", "--rounds", "2", "--latency",
                     "bw:1,hosts:1", "--progress", "off", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "put more ranks on a host (hosts:R)" in err[0], err


# ---------------------------------------------------------------- configuration
def test_config_defaults_and_validation(tmp_path):
    cfg = resolve({"nodes": 4})
    assert (cfg.latency, cfg.clock, cfg.compute_time) == ("none", "real", None)
    def layer_active(c):
        return latency.needs_layer(c.latency, c.clock, c.compute_time)

    assert not layer_active(cfg)
    assert layer_active(resolve({"nodes": 4, "latency": "mod:5"}))
    assert layer_active(resolve({"nodes": 4, "clock": "virtual"}))
    assert layer_active(resolve({"nodes": 4, "compute_time": 3.0}))
    with pytest.raises(UsageError, match="unknown model"):
        resolve({"nodes": 4, "latency": "ring:5"})
    with pytest.raises(UsageError, match="4 nodes"):
        # (the disk: the one preparation step)
        check_job(load({"nodes": 4, "latency": "matrix:" + write_csv(tmp_path / "d.csv",
                                                                    TRIANGLE)}))
    with pytest.raises(UsageError, match="--compute-time"):
        resolve({"nodes": 4, "compute_time": -1.0})
    with pytest.raises(UsageError, match="--compute-time"):
        resolve({"nodes": 4, "compute_time": float("nan")})


@pytest.mark.parametrize("flags,message", [
    (["--latency", "mod:-5"], "must be >= 0"),
    (["--latency", "banana"], "unknown model 'banana'"),
    (["--latency", "mod:nan"], "finite"),
    (["--clock", "wall"], "choose one of real, virtual"),
    (["--compute-time", "-2"], "--compute-time"),
])
def test_bad_flags_give_one_line_and_exit_2(flags, message):
    proc = subprocess.run([sys.executable, "-m", "mpi_teleport.sim", "--nodes", "4", *flags],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_toml_accepts_the_new_keys(tmp_path):
    from mpi_teleport.front import cli

    toml = tmp_path / "c.toml"
    toml.write_text('latency = "mod:5,bw:10"\nclock = "virtual"\ncompute-time = 12.5\n')
    parser = cli.build_parser("x", "x")
    cfg = cli.parse(parser, ["--config", str(toml), "--nodes", "25"])
    assert (cfg.latency, cfg.clock, cfg.compute_time) == ("mod:5,bw:10", "virtual", 12.5)


# ---------------------------------------------------------------- virtual time: oracle
def oracle(tmp_path, n, spec, compute, algorithm="dsgd", k=None, **cfg):
    raw = {"nodes": n, "latency": spec, "clock": "virtual", "compute_time": compute,
           "algorithm": algorithm, **cfg}
    if k is not None:
        raw["k"] = k
    c = resolve(raw)
    spec = run_spec(c, algorithm, n if algorithm == "dsgd" else c.k)
    return for_run(spec, LatencySettings(c.latency, c.clock, c.compute_time), c.dim, 8)


def test_ring_of_four_hand_computed_critical_path(tmp_path):
    spec = "matrix:" + write_csv(tmp_path / "d.csv", RING4)
    o = oracle(tmp_path, 4, spec, 100.0)
    # round 1: everyone computes 100 us, then waits for its slower neighbour
    o.advance_to(1)
    assert o.clock.tolist() == [1100.0, 3100.0, 3100.0, 2100.0]
    o.advance_to(2)  # e.g. node 0: max(1200, 3200 + 1000, 2200 + 500)
    assert o.clock.tolist() == [4200.0, 6200.0, 6200.0, 5200.0]
    o.advance_to(3)
    assert o.clock.tolist() == [7300.0, 9300.0, 9300.0, 8300.0]
    assert o.time_s() == 0.0093  # the 3 ms link 1-2 plus 100 us compute, every round


def test_neighbours_at_1_and_3_ms_cost_3_ms_not_4(tmp_path):
    spec = "matrix:" + write_csv(tmp_path / "d.csv", TRIANGLE)
    o = oracle(tmp_path, 3, spec, 0.0)  # ring over 3 nodes: everyone talks to everyone
    o.advance_to(1)
    assert o.clock[0] == 3000.0


def test_simulator_logs_the_hand_computed_virtual_time(tmp_path):
    spec = "matrix:" + write_csv(tmp_path / "d.csv", RING4)
    assert sim_main(["--nodes", "4", "--algorithm", "dsgd", "--latency", spec, "--clock", "virtual",
                     "--compute-time", "100", "--rounds", "3", "--log-every", "1",
                     "--out", str(tmp_path / "o")]) == 0
    recs = read_jsonl(tmp_path / "o" / "metrics.jsonl")
    assert [r["virtual_time_s"] for r in recs] == [0.0, 0.0031, 0.0062, 0.0093]


@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_single_token_follows_the_schedule(tmp_path, variant):
    """k = 1: the token hops holders(t) -> holders(t+1); Alg. 3 pays compute + the hop each
    round; Alg. 1 pays the fetch hop (none in round 0), then compute."""
    n, tau, c, rounds = 25, 5.0, 7.0, 40
    o = oracle(tmp_path, n, f"mod:{tau:g}", c, algorithm="teleportation", k=1, variant=variant,
               seed=3)
    o.advance_to(rounds)
    h = [int(schedule.holders(3, n, 1, t)[0]) for t in range(rounds + 1)]
    hop = [tau * (abs(h[t] - h[t + 1]) % 24) for t in range(rounds)]
    expected = 0.0
    for t in range(rounds):
        expected = expected + c + hop[t] if variant == "overlap" else \
            expected + (hop[t - 1] if t > 0 else 0.0) + c
    assert o.clock.max() == expected


def test_one_phase_is_cheaper_than_two(tmp_path):
    """Alg. 3 overlaps the move with the gossip: per round it pays one link, Alg. 1 two."""
    times = {}
    for variant in ("overlap", "simple"):
        o = oracle(tmp_path, 25, "mod:5", 10.0, algorithm="teleportation", k=8, variant=variant)
        o.advance_to(200)
        times[variant] = o.time_s()
    assert times["overlap"] < times["simple"]


def test_latency_never_changes_numbers(tmp_path):
    base = ["--nodes", "6", "--k", "3", "--rounds", "30", "--log-every", "5", "--momentum", "0.5"]
    outs = []
    for extra in ([], ["--latency", "mod:20,bw:1", "--clock", "virtual"], ["--compute-time", "5"]):
        out = tmp_path / str(len(outs))
        assert sim_main([*base, *extra, "--out", str(out)]) == 0
        outs.append([(r["round"], r["error"], r["consensus"])
                     for alg in ("teleportation", "dsgd")
                     for r in read_jsonl(out / alg / "metrics.jsonl")])
    assert outs[0] == outs[1] == outs[2]
    assert "virtual_time_s" not in read_jsonl(tmp_path / "0" / "dsgd" / "metrics.jsonl")[0]


class _Delivered:
    """An inner transport on which every message has already arrived: a receive fills its
    buffer with ``value`` (so a clock stamp reads ``value`` microseconds)."""

    rank, size = 1, 2

    def __init__(self, value: float):
        self.value = value

    def dup(self):
        return _Delivered(self.value)

    def tag(self, t, kind):
        return 4 * t + kind

    def irecv(self, buf, source, tag):
        buf[...] = self.value
        return ["request"]

    def testall(self, requests):
        return True

    def meanwhile(self, requests, work):  # as Transport.meanwhile: a test after each step
        for _ in work:
            if self.testall(requests):
                return

    def wait_all(self, requests):
        pass

    def wait(self, pending):
        pass


class _Drawn:
    """A problem whose ``prepare`` burns CPU in three steps."""

    dim, dtype = 4, np.float64

    def prepare(self, nodes, t):
        for _ in range(3):
            sum(i * i for i in range(20000))
            yield


def _layer(sender_clock_us: float):
    from mpi_teleport.latency.layer import LatencyTransport
    from mpi_teleport.latency.model import parse_spec

    layer = LatencyTransport(_Delivered(sender_clock_us), parse_spec("const:500"), clock="virtual")
    pending = layer.post_recvs([(0, layer.tag(3, 0), np.empty(4))])
    return layer, pending


def test_work_done_while_waiting_overlaps_the_wait():
    """The clock after a wait is max(clock + the CPU time of the work done meanwhile, each
    arrival): the next round's prepared draws hide behind the wire, hand-computed."""
    layer, pending = _layer(1000.0)  # arrival: stamp 1000 + delta 500
    layer.beside(200.0)
    layer.wait(pending)
    assert layer.clock_us == 1500.0
    layer, pending = _layer(1000.0)
    layer.advance(300.0)
    layer.beside(2000.0)  # the work outlasts the wire
    layer.wait(pending)
    assert layer.clock_us == 2300.0
    layer, pending = _layer(1000.0)
    layer.beside(2000.0)
    layer.wait(pending)
    assert layer.clock_us == 2000.0
    layer.wait(layer.post_recvs([(0, layer.tag(4, 0), np.empty(4))]))  # counted once
    assert layer.clock_us == 2000.0


def test_the_timed_problem_counts_prepared_work_beside_the_wait():
    from mpi_teleport.latency.layer import TimedProblem

    layer, pending = _layer(0.0)
    measured = TimedProblem(_Drawn(), layer, LatencySettings("const:500", "virtual"))
    layer.meanwhile(pending, measured.prepare([1], 3))  # the messages are in: one step
    one_step = layer._beside_us
    assert one_step > 0
    layer.wait(pending)
    assert layer.clock_us == max(one_step, 500.0) and layer._beside_us == 0
    # a modelled compute time per step (--compute-time) covers the prepared work too
    fixed = TimedProblem(_Drawn(), layer, LatencySettings("const:500", "virtual", 50.0))
    for _ in fixed.prepare([1], 3):
        pass
    assert layer._beside_us == 0
