"""Elastic mode on the two-host namespace test bed (jobs/netns-cluster.sh; issue 23): a
rank dying on the remote host, and the remote host's processes all killed at once (its
ranks and its Open MPI daemon: a host lost). The survivors finish with exit 0 and their
records equal the simulator's told of the same losses. Open MPI only (ULFM)."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from launch_helpers import implementation, kill_tagged, tagged_pids
from test_multihost import finish, hostname_of, start, start_running

from mpi_teleport.sim import main as sim_main

ARGS = ["--algorithm", "teleportation", "--k", "2", "--momentum", "0.5", "--seed", "5",
        "--lr", "0.05", "--dim", "8", "--log-every", "20", "--progress", "off",
        "--agree-every", "1", "--elastic"]  # (every round agreed: a loss at the kill's round)


@pytest.fixture
def openmpi():
    impl = implementation("openmpi")
    if isinstance(impl, str):
        pytest.skip(f"openmpi: {impl}")
    return impl


def records(path):
    return [{k: v for k, v in json.loads(line).items() if k != "time_s"}
            for line in open(path) if line.strip()]


def simulated(tmp_path, rounds, lost):
    out = tmp_path / "sim"
    argv = ["--nodes", "4", "--rounds", str(rounds), *[a for a in ARGS if a != "--elastic"],
            "--out", str(out)]
    for node, r in lost:
        argv += ["--fail", f"{node}@{r}"]
    assert sim_main(argv) == 0
    return out


def parent(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


def comm(pid: int) -> str:
    return open(f"/proc/{pid}/comm").read().strip()


def test_rank_dying_on_the_remote_host(bed, openmpi, tmp_path, monkeypatch):
    monkeypatch.setenv("MPI_TELEPORT_TEST_DIE", "3@30")  # rank 3: the second on mtp-h1
    out = tmp_path / "run"
    proc = start(openmpi, 4, ["-m", "mpi_teleport.run", "--rounds", "80", *ARGS, "--out", str(out)],
                 tmp_path)
    status, _, err = finish(proc, tmp_path, timeout=180)
    assert status == 0, err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [(x["node"], x["round"]) for x in summary["lost"]] == [(3, 30)]
    assert records(out / "metrics.jsonl") == records(simulated(tmp_path, 80, [(3, 30)]) / "metrics.jsonl")


@pytest.mark.parametrize("daemon", [False, True], ids=["ranks", "ranks-and-daemon"])
def test_a_whole_host_lost(bed, openmpi, tmp_path, daemon):
    """Both ranks of mtp-h1 SIGKILLed during the run: the survivors finish, exit 0, equal
    to the simulator told of the same losses (or, when both tokens sat on mtp-h1 at that
    moment, exit 75 saying so: no token is left to restore from). With the host's Open MPI daemon (prted)
    killed too, this PRRTE build ends the whole job ("lost communication with a remote
    daemon"): no hang, no summary.json, so the job scripts take it as interrupted and
    requeue from the newest checkpoint (docs/tutorials/elastic.md, "A whole host lost")."""
    out = tmp_path / "run"
    rounds = 3000
    proc = start_running(openmpi, 4, ["-m", "mpi_teleport.run", "--rounds", str(rounds), *ARGS,
                                      "--out", str(out), "--checkpoint-every", "100"], tmp_path, out)
    try:
        remote = [pid for pid in tagged_pids(proc.tag) if hostname_of(pid) == "mtp-h1"]
        assert len(remote) >= 2, remote
        daemons = {parent(pid) for pid in remote} - set(remote)  # the ranks' prted
        assert daemons and all(comm(pid) == "prted" for pid in daemons), [comm(p) for p in daemons]
        for pid in [*(daemons if daemon else ()), *remote]:
            os.kill(pid, signal.SIGKILL)
        status, _, err = finish(proc, tmp_path, timeout=90)  # (a hang fails here)
    finally:
        kill_tagged(proc.tag)
    time.sleep(0.5)
    if daemon:
        assert not (out / "summary.json").exists()
        assert "lost communication with a remote daemon" in err
        return
    if status == 75:  # both tokens sat on mtp-h1 at that moment: nothing to restore from
        assert "every token's holder was lost" in err, err[-3000:]
        return
    assert status == 0, err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    lost = [(x["node"], x["round"]) for x in summary["lost"]]
    assert sorted(node for node, _ in lost) == [2, 3], lost
    assert summary["rounds_run"] == rounds
    assert records(out / "metrics.jsonl") == records(simulated(tmp_path, rounds, lost) / "metrics.jsonl")


def test_a_spare_on_one_host_replaces_a_node_lost_on_the_other(bed, openmpi, tmp_path,
                                                                monkeypatch):
    """Hot spares (issue 32): 4 nodes and 2 spares, three ranks a host (nodes 0-2 on
    mtp-h0; node 3 and spares 4, 5 on mtp-h1). Node 1 dies on mtp-h0 at round 30 and spare
    4 on mtp-h1 becomes node 1 (its data, its tokens), equal to the simulator."""
    out = tmp_path / "run"
    monkeypatch.setenv("MPI_TELEPORT_TEST_DIE", "1@30")
    proc = start(openmpi, 6, ["-m", "mpi_teleport.run", "--rounds", "80", *ARGS, "--spares", "2",
                              "--out", str(out)], tmp_path)
    status, _, err = finish(proc, tmp_path, timeout=180)
    assert status == 0, err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [(x["node"], x["round"], x["spare"]) for x in summary["replaced"]] == [(1, 30, 4)]
    sim = tmp_path / "sim"
    argv = ["--nodes", "4", "--rounds", "80", *[a for a in ARGS if a != "--elastic"],
            "--spares", "2", "--fail", "1@30", "--out", str(sim)]
    assert sim_main(argv) == 0
    assert records(out / "metrics.jsonl") == records(sim / "metrics.jsonl")
