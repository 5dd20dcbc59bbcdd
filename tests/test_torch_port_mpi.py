"""Issue 22 under mpirun (2 ranks, one launch): keyed augmentation (a Dataset transform
drawing from the global generators and the augment hook), custom EvalMetrics as the
headline and search_k's selection, frozen parameters with weight decay and clipping and
the training-sample evaluation with per-rank data, Nesterov momentum (host and device
token paths) -- each bit-identical to the simulator,
and the callback called on the root only (tests/scripts/torch_port_ranks.py)."""
import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.one_mpi]

CASES = ("augmentation", "augmentation-dsgd", "custom-metrics-search", "frozen-train-sample",
         "nesterov", "nesterov-device-tokens")


def test_ported_script_features_under_mpirun_equal_the_simulator(mpirun):
    proc = mpirun(2, ["tests/scripts/torch_port_ranks.py"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:-1] == [f"ok {c}" for c in CASES], proc.stdout + proc.stderr[-2000:]
