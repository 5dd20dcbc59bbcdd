"""Issue 47: the two ported scripts shipped as examples -- the PyTorch tutorials'
quickstart (mpi_teleport/examples/quickstart_port.py: Fashion-MNIST, MLP, SGD) and
pytorch/examples' mnist/main.py (mpi_teleport/examples/mnist_main_port.py: Adadelta +
StepLR, its own argparse flags with the package's beside them) -- run unchanged as ``python script.py`` and under ``launch -n 4``
(comm="auto", local_nodes="auto", mt.on_root) and print the same lines, on tiny generated
data (torchvision's FakeData); the saved models are identical."""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.torch,  # (torchvision found, not imported: its scripts import it)
              pytest.mark.skipif(__import__("importlib.util").util.find_spec("torchvision") is None,
                                 reason="needs torchvision (the nn extra)")]
EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "mpi_teleport" / "examples"

CASES = {
    "quickstart_port.py": ["--fake-data", "256", "--epochs", "1", "--save", "model.pth"],
    # (its own argparse with the package's flags beside: Adadelta and StepLR by name here,
    # equal to them by keyword: tests/test_script_command_line.py; issue 57)
    "mnist_main_port.py": ["--fake-data", "128", "--epochs", "2", "--batch-size", "16",
                           "--test-batch-size", "32", "--log-interval", "2", "--save-model",
                           "--optimizer", "adadelta", "--optimizer-args", "rho=0.9",
                           "--lr-scheduler", "StepLR", "--lr-scheduler-args",
                           "step_size=1,gamma=0.7", "--topology", "complete", "--out", "run"],
}
SAVED = {"quickstart_port.py": "model.pth", "mnist_main_port.py": "mnist_cnn.pt"}


@pytest.mark.parametrize("script", sorted(CASES))
def test_a_port_runs_alone_and_under_launch_alike(tmp_path, script):
    from launch_helpers import this_venv_impl

    path, flags = str(EXAMPLES / script), CASES[script]
    alone, launched = tmp_path / "alone", tmp_path / "launched"
    alone.mkdir(), launched.mkdir()
    one = subprocess.run([sys.executable, path, *flags], cwd=alone, capture_output=True,
                         text=True, timeout=240)
    assert one.returncode == 0, one.stderr[-3000:]
    env = this_venv_impl().env(None, "ports")
    four = subprocess.run([sys.executable, "-m", "mpi_teleport.launch", "-n", "4", path, *flags],
                          cwd=launched, capture_output=True, text=True, timeout=300, env=env)
    assert four.returncode == 0, four.stderr[-3000:]
    assert four.stdout == one.stdout and ("round 0" in one.stdout
                                          or "Train Epoch: 1" in one.stdout)
    a = torch.load(alone / SAVED[script])
    b = torch.load(launched / SAVED[script])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    if "--out" in flags:  # (the records too, bit for bit)
        from helpers import without_time
        from mpi_teleport.disk.output import read_jsonl

        assert without_time(read_jsonl(alone / "run" / "metrics.jsonl")) == \
            without_time(read_jsonl(launched / "run" / "metrics.jsonl"))
