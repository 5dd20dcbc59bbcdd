"""Issue 30 under mpirun (2 ranks, one launch): AdamW with a LinearLR warm-up chained with
a cosine (SequentialLR), Adam with OneCycleLR per round in DSGD, an AdamW run
interrupted and resumed under MPI -- each bit-identical to the simulator, with the
training loss in every record and eval_every's records without evaluation -- and
threads="auto" giving each rank its share of the host (tests/scripts/torch_feel_ranks.py)."""
import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch]

CASES = ("adamw-warmup-cosine", "adam-dsgd-one-cycle", "adamw-resumed", "threads-auto")


def test_optimizers_schedulers_and_training_records_under_mpirun_equal_the_simulator(mpirun, tmp_path):
    proc = mpirun(2, ["tests/scripts/torch_feel_ranks.py", str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:-1] == [f"ok {c}" for c in CASES], proc.stdout + proc.stderr[-2000:]
