"""Issue 47: comm="auto", local_nodes="auto" and mt.on_root outside a launcher (the
simulator, no MPI initialised); under ``launch -n 4``: tests/test_ports.py."""
import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.runtime import launched


def test_outside_a_launcher_auto_is_the_simulator(monkeypatch):
    for name in launched.LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not launched.under_launcher() and launched.auto_comm() is None
    assert mt.on_root() and launched.auto_local_nodes(4) is None
    auto = mt.dsgd(Quadratic(n=4, d=3), nodes=4, rounds=4, lr=0.05, comm="auto")
    plain = mt.dsgd(Quadratic(n=4, d=3), nodes=4, rounds=4, lr=0.05)
    assert auto.summary["backend"] == "sim" and (auto.x == plain.x).all()


def test_a_launcher_is_seen_in_the_environment():
    assert launched.under_launcher({"OMPI_COMM_WORLD_SIZE": "4"})
    assert launched.under_launcher({"PMIX_RANK": "0"})  # (rank 0 of a PMIx launch too)
    assert not launched.under_launcher({"HOME": "/root"})
