"""Issue 50, class 5: inputs that reached internal code unchecked are one line (a
UsageError) through the command line and the API, in the simulator and under mpirun.

* ``--latency ...,hosts:²``: ``str.isdigit`` accepts '²' (and other digits of Unicode)
  where ``int()`` does not; the spec now takes ASCII digits only.
* ``--spares 1000000000`` in the simulator built a billion-entry list (21 GB, the kernel's
  OOM killer); spares are now part of the run's memory estimate, refused with the figure
  before anything is allocated (the manual's "Inputs that cannot fit").

(Rows here, beside the bad-input tables of tests/test_bad_inputs.py and
tests/test_api_bad_inputs.py, which other work is changing at the same time.)
"""
from __future__ import annotations

import pytest

import mpi_teleport as mt
from mpi_teleport.errors import UsageError
from mpi_teleport.session import preflight
from mpi_teleport.problems.quadratic import quadratic
from mpi_teleport.sim import main as sim_main

SMALL = ["--nodes", "4", "--k", "2", "--rounds", "2", "--algorithm", "teleportation", "--progress", "off"]
HOSTS = "hosts: takes the ranks per host (hosts:2), the hosts' sizes in rank order (hosts:2+3), " \
        "whole numbers >= 1, or auto (MPI's placement); got "


@pytest.mark.parametrize("hosts", ["²", "2+²", "٣", "1+2²", "+2", "2.0", "-2", "0"])
def test_hosts_takes_ascii_whole_numbers_only(hosts, tmp_path, capsys):
    assert sim_main([*SMALL, "--latency", f"const:5,bw:1,hosts:{hosts}", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m mpi_teleport.sim: error: --latency ")
    assert err[0].endswith(HOSTS + repr(hosts)), err[0]
    with pytest.raises(UsageError, match="latency 'const:5,bw:1,hosts:") as exc:
        mt.teleportation(quadratic(4, dim=4), nodes=4, k=2, rounds=2, lr=0.1,
                         latency=f"const:5,bw:1,hosts:{hosts}")
    assert len(str(exc.value).splitlines()) == 1 and "--latency" not in str(exc.value)


def test_spares_beyond_this_machines_memory_are_refused_with_the_figure(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(preflight, "memory_bytes", lambda: 2**30)  # (1 GiB: 16 million spares)
    argv = [*SMALL, "--spares", "1000000000", "--fail", "1@1", "--out", str(tmp_path / "run")]
    assert sim_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m mpi_teleport.sim: error: --spares 1000000000: the simulator needs about "
                   "59.6 GiB to keep track of 1000000000 hot spares, more than the 1 GiB of memory here; "
                   "a spare only takes over a lost node: give at most as many as --fail loses"]
    assert not (tmp_path / "run").exists()  # (refused before anything was written)
    with pytest.raises(UsageError) as exc:
        mt.teleportation(quadratic(4, dim=4), nodes=4, k=2, rounds=2, lr=0.1, spares=10**9, fail=["1@1"])
    assert str(exc.value).startswith("spares=1000000000: the simulator needs about 59.6 GiB")
    assert "give at most as many as fail loses" in str(exc.value)
    # (a few spares still run, both ways)
    assert sim_main([*SMALL, "--spares", "2", "--fail", "1@1", "--out", str(tmp_path / "ok")]) in (0, 75)
    capsys.readouterr()


def test_bad_hosts_under_mpirun_is_one_line_exit_2(mpirun):
    proc = mpirun(2, ["-m", "mpi_teleport.run", "--latency", "const:5,bw:1,hosts:²", "--rounds", "2"],
                  timeout=120)
    assert proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if "mpi_teleport.run: error:" in line]
    assert len(ours) == 1 and ours[0].endswith(HOSTS + "'²'"), proc.stderr[-2000:]  # (rank 0 alone)
    assert "Traceback" not in proc.stderr
