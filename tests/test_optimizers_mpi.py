"""Issue 47 under mpirun (4 ranks, one launch): Adadelta (Teleportation), RMSprop with a
StepLR (DSGD), a third-party-style Optimizer subclass, and an Adadelta run interrupted
and resumed under MPI, Adadelta under the latency layer's virtual clock (its two state
vectors one message) -- each bit-identical to the simulator, virtual time included
(tests/scripts/torch_optimizers_ranks.py)."""
import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch]

CASES = ("adadelta-teleportation", "rmsprop-dsgd", "lion-teleportation", "adadelta-resumed",
         "adadelta-latency-overlap", "adadelta-latency-simple")


def test_any_optimizer_under_mpirun_equals_the_simulator(mpirun, tmp_path):
    proc = mpirun(4, ["tests/scripts/torch_optimizers_ranks.py", str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:-1] == [f"ok {c}" for c in CASES], proc.stdout + proc.stderr[-2000:]
