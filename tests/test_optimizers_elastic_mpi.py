"""Issue 47: an optimizer with more than one state vector a token (Adam's two moments) in
elastic mode under MPI: a rank killed mid-run, the survivors go on (a restored token's
state zero, as momentum), and the records equal the simulator's told of the same failure
(tests/test_elastic_mpi.py's harness; Open MPI with ULFM)."""
import pytest

pytest.importorskip("torch")

from test_elastic_mpi import assert_equal_runs, holder_and_idle  # noqa: E402

pytestmark = [pytest.mark.torch]


@pytest.mark.parametrize("algorithm", ["teleportation"])  # (DSGD's: the simulator, test_optimizers)
def test_adam_in_elastic_mode_equals_the_simulator(tmp_path, algorithm):
    holder, _ = holder_and_idle(4, 2, 7)
    args = ["--algorithm", algorithm, "--optimizer", "adam",
            *(["--k", "2"] if algorithm == "teleportation" else [])]
    s = assert_equal_runs(tmp_path, 4, args, f"{holder}@7", [f"{holder}@7"])
    assert [x["node"] for x in s["lost"]] == [holder]
