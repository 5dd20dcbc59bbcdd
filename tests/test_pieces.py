"""Large messages travel in pieces (mpi_teleport/runtime/transport.py, issue 33): the slicing,
and runs over MPI whose records are bit for bit the simulator's with messages cut into
many pieces, on both paths (persistent channels; per-round messages under the latency
layer, whose virtual clock is unchanged by the pieces)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from mpi_teleport.runtime.transport import (PIECE_BYTES, PIPELINE_BYTES, piece_bytes_from_env,
                                            piece_peers_from_env, pieces,
                                            pipeline_bytes_from_env)


def test_pieces_are_consecutive_views_of_the_buffer():
    buf = np.arange(1000, dtype=np.float64)
    got = pieces(buf, 800)  # 100 elements a piece
    assert [len(p) for p in got] == [100] * 10
    assert all(np.shares_memory(p, buf) for p in got)
    assert np.concatenate(got).tolist() == buf.tolist()
    got = pieces(buf, 808)  # 101 elements: the last piece is shorter
    assert [len(p) for p in got] == [101] * 9 + [91]
    got[3][0] = -1.0  # a receive into a piece lands in the buffer
    assert buf[303] == -1.0


def test_small_whole_or_off():
    buf = np.zeros(10)
    assert pieces(buf, 80)[0] is buf and len(pieces(buf, 80)) == 1  # exactly the piece size
    assert pieces(np.zeros(1000), 0)[0].size == 1000  # 0: whole messages
    strided = np.zeros(2000)[::2]
    assert pieces(strided, 80)[0] is strided  # (not contiguous: whole, as MPI would have it)


def test_at_most_most_pieces():
    got = pieces(np.zeros(10_000), 80, most=7)
    assert len(got) <= 7 and sum(len(p) for p in got) == 10_000


def test_piece_size_from_the_environment():
    assert piece_bytes_from_env({}) == PIECE_BYTES == 60 * 1024
    assert piece_bytes_from_env({"MPI_TELEPORT_PIECE_BYTES": "0"}) == 0
    assert piece_bytes_from_env({"MPI_TELEPORT_PIECE_BYTES": " 4096 "}) == 4096
    for bad in ("-1", "1e3", "lots"):
        with pytest.raises(ValueError, match="MPI_TELEPORT_PIECE_BYTES"):
            piece_bytes_from_env({"MPI_TELEPORT_PIECE_BYTES": bad})


def test_whose_messages_are_cut_from_the_environment():
    assert piece_peers_from_env({}) == "hosts"  # peers on other hosts (by processor name)
    assert piece_peers_from_env({"MPI_TELEPORT_PIECE_PEERS": "ALL"}) == "all"
    with pytest.raises(ValueError, match="MPI_TELEPORT_PIECE_PEERS"):
        piece_peers_from_env({"MPI_TELEPORT_PIECE_PEERS": "some"})


def test_pipelined_block_from_the_environment():
    assert pipeline_bytes_from_env({}) == PIPELINE_BYTES == 1 << 20
    assert pipeline_bytes_from_env({"MPI_TELEPORT_PIPELINE_BYTES": "0"}) == 0  # off
    assert pipeline_bytes_from_env({"MPI_TELEPORT_PIPELINE_BYTES": " 65536 "}) == 65536
    for bad in ("-1", "1e3", "lots"):
        with pytest.raises(ValueError, match="MPI_TELEPORT_PIPELINE_BYTES.*0: tokens"):
            pipeline_bytes_from_env({"MPI_TELEPORT_PIPELINE_BYTES": bad})


def test_a_bad_setting_is_a_usage_error():
    """Each setting's bad value is a UsageError (one line and status 2 at the front door,
    as the next test shows for one of them through mpirun)."""
    from mpi_teleport.errors import UsageError

    for read, name in ((piece_bytes_from_env, "MPI_TELEPORT_PIECE_BYTES"),
                       (pipeline_bytes_from_env, "MPI_TELEPORT_PIPELINE_BYTES"),
                       (piece_peers_from_env, "MPI_TELEPORT_PIECE_PEERS")):
        with pytest.raises(UsageError, match=name):
            read({name: "lots"})


def test_a_bad_setting_is_one_line(tmp_path, mpirun):
    """A bad value in the environment ends the run with status 2 and one line naming it,
    not a traceback from every rank."""
    name = "MPI_TELEPORT_PIPELINE_BYTES"
    proc = mpirun(2, ["-m", "mpi_teleport.run", "--rounds", "2", "--progress", "off",
                      "--out", str(tmp_path / "o")], env={**os.environ, name: "lots"}, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and f"{name}='lots'" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def numbers(path):
    return [(r["round"], r["error"], r["consensus"]) for r in read_jsonl(path)]


@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_records_in_pieces_equal_the_simulator(tmp_path, mpirun, variant):
    """Tokens of 50 float64 (400 bytes) in pieces of 56 bytes (8 pieces, the last short), to
    every peer (on one machine no peer is on another host: MPI_TELEPORT_PIECE_PEERS=all):
    channels (no latency layer) and per-round messages (virtual clock with shared host
    links) give the simulator's numbers and virtual time bit for bit."""
    common = ["--k", "3", "--variant", variant, "--momentum", "0.5", "--dim", "50",
              "--topology", "base2", "--rounds", "12", "--log-every", "3", "--seed", "5"]
    clock = ["--latency", "mod:7,bw:1,hosts:2", "--clock", "virtual", "--compute-time", "3.5"]
    assert sim_main(["--nodes", "5", *common, *clock, "--progress", "off",
                     "--out", str(tmp_path / "sim")]) == 0
    env = {**os.environ, "MPI_TELEPORT_PIECE_BYTES": "56", "MPI_TELEPORT_PIECE_PEERS": "all"}
    for name, extra in (("channels", []), ("layer", clock)):
        proc = mpirun(5, ["-m", "mpi_teleport.run", *common, *extra, "--progress", "off",
                          "--out", str(tmp_path / name)], env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    for alg in ("teleportation", "dsgd"):
        ref = read_jsonl(tmp_path / "sim" / alg / "metrics.jsonl")
        assert len(ref) == 5
        for name in ("channels", "layer"):
            assert numbers(tmp_path / name / alg / "metrics.jsonl") == numbers(
                tmp_path / "sim" / alg / "metrics.jsonl")
        assert [r["virtual_time_s"] for r in read_jsonl(tmp_path / "layer" / alg / "metrics.jsonl")] \
            == [r["virtual_time_s"] for r in ref]


@pytest.mark.parametrize("variant", ["overlap", "simple"])
def test_pipelined_large_tokens_equal_the_simulator(tmp_path, mpirun, variant):
    """Tokens of 300,000 float64 (2.4 MB) in the default pieces (60 KiB) to every peer: the
    compiled rounds step the quadratic a block of columns (1 MiB) at a time, start each
    block's pieces as soon as it is computed and sum a block as soon as its pieces are in
    (backends/compiled.py); the records are the simulator's bit for bit."""
    common = ["--k", "3", "--variant", variant, "--momentum", "0.5", "--dim", "300000",
              "--topology", "base2", "--rounds", "6", "--log-every", "3", "--seed", "5",
              "--algorithm", "teleportation", "--progress", "off"]
    assert sim_main(["--nodes", "4", *common, "--out", str(tmp_path / "sim")]) == 0
    env = {**os.environ, "MPI_TELEPORT_PIECE_PEERS": "all"}
    proc = mpirun(4, ["-m", "mpi_teleport.run", *common, "--out", str(tmp_path / "mpi")],
                  env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    want = numbers(tmp_path / "sim" / "metrics.jsonl")
    assert len(want) == 3
    assert numbers(tmp_path / "mpi" / "metrics.jsonl") == want


def test_ranks_that_would_cut_messages_differently_are_refused(tmp_path, mpirun):
    """The piece size is part of the start-up agreement: a rank started with another
    would silently receive a piece as a whole message."""
    proc = mpirun(2, ["-c", "import os; from mpi4py import MPI; "
                      "os.environ['MPI_TELEPORT_PIECE_BYTES'] = str(64 + MPI.COMM_WORLD.rank); "
                      "os.environ['MPI_TELEPORT_PIECE_PEERS'] = 'all'; "
                      "import sys; from mpi_teleport.run import main; "
                      "sys.exit(main(['--nodes', '2', '--rounds', '2', '--progress', 'off', "
                      f"'--out', {str(tmp_path / 'o')!r}]))"], timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "piece_bytes" in proc.stderr


def test_column_blocks_start_a_piece_once_computed_and_wait_for_it_before_it_is_read():
    """The pipeline's blocks (backends/compiled.py): consecutive, ending at piece ends, at
    least ``least`` columns each but the last; a send's piece goes with the first block
    that computed all of it, a receive's piece is awaited by the first block that reads it;
    nothing to pipeline when no channel is in pieces."""
    from mpi_teleport.runtime.backends.compiled import column_blocks

    d = 1000
    cut = [(a, min(a + 70, d)) for a in range(0, d, 70)]  # 15 pieces of 70 (the last 20)
    whole = [(0, d)]
    channels = [([f"a{i}" for i in range(len(cut))], cut), (["b"], whole)]
    for send in (True, False):
        blocks = column_blocks(d, channels, 200, send)
        assert blocks is not None
        ends = [c.stop for c in blocks.columns]
        assert ends == [210, 420, 630, 840, d]
        assert [c.start for c in blocks.columns] == [0] + ends[:-1]
        placed = {r: i for i, requests in enumerate(blocks.requests) for r in requests}
        assert len(placed) == len(cut) + 1
        for i, (start, stop) in enumerate(cut):
            block = blocks.columns[placed[f"a{i}"]]
            if send:  # all of it computed by then, and not a block later than needed
                assert block.stop >= stop and block.start < stop
            else:  # in before its first column is read
                assert block.start <= start < block.stop
        assert placed["b"] == (len(ends) - 1 if send else 0)  # a whole message: last / first
    assert column_blocks(d, [(["b"], whole)], 200, True) is None
