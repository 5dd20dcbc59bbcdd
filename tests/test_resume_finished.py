"""Issue 47: ``resume=`` of a finished run returns its result (records, summary and the
final model x, from the final checkpoint), and ``resume="auto"`` continues an unfinished
run in the directory, returns a finished one and starts a fresh one where there is none:
one line a job array can rerun (mpi_teleport/checkpoint/find.py, checkpoint/keeper.py)."""
import shutil

import numpy as np
import pytest

import mpi_teleport as mt
from mpi_teleport.errors import UsageError
from mpi_teleport.problems.quadratic import Quadratic
from helpers import without_time


def quadratic():
    return Quadratic(n=4, d=3, seed=0)


RUN = dict(nodes=4, k=2, lr=0.05, log_every=2)


def test_resuming_a_finished_run_returns_its_result(tmp_path):
    done = mt.teleportation(quadratic(), rounds=8, out=tmp_path / "run", checkpoint_every=3,
                            **RUN)
    again = mt.teleportation(quadratic(), rounds=8, out=tmp_path / "run",
                             resume=tmp_path / "run", **RUN)
    assert np.array_equal(again.x, done.x)
    assert without_time(again.records) == without_time(done.records)
    assert {k: v for k, v in again.summary.items() if k != "wall_time_s"} == \
        {k: v for k, v in done.summary.items() if k != "wall_time_s"}


def test_resume_auto_starts_continues_and_returns(tmp_path):
    full = mt.teleportation(quadratic(), rounds=8, **RUN)
    where = dict(out=tmp_path / "run", checkpoint_every=2, resume="auto")
    fresh = mt.teleportation(quadratic(), rounds=8, **where, **RUN)  # none there: a fresh run
    assert fresh.records[0]["round"] == 0 and fresh.summary["rounds_run"] == 8
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "round-00000008")  # (as if killed at 7)
    continued = mt.teleportation(quadratic(), rounds=8, **where, **RUN)  # unfinished: continued
    assert without_time(continued.records) == without_time(full.records)
    assert np.array_equal(continued.x, full.x)
    finished = mt.teleportation(quadratic(), rounds=8, **where, **RUN)  # finished: returned
    assert without_time(finished.records) == without_time(full.records)
    assert np.array_equal(finished.x, full.x)
    with pytest.raises(UsageError, match="resume='auto' needs out= or checkpoint_dir="):
        mt.teleportation(quadratic(), rounds=8, resume="auto", **RUN)


def test_a_finished_torch_run_resumed_gives_its_model(tmp_path):
    torch = pytest.importorskip("torch")
    gen = np.random.default_rng(0)
    X = gen.standard_normal((64, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)

    def problem():
        return mt.TorchProblem(lambda: torch.nn.Linear(4, 2), (X, y), nodes=4, seed=1,
                               batch_size=4)

    done = mt.dsgd(problem(), nodes=4, rounds=6, lr=0.1, out=tmp_path / "r", resume="auto",
                   checkpoint_every=3)
    p = problem()
    again = mt.dsgd(p, nodes=4, rounds=6, lr=0.1, out=tmp_path / "r", resume="auto",
                    checkpoint_every=3)
    assert np.array_equal(again.x, done.x)
    assert torch.equal(p.module(again.x).weight, problem().module(done.x).weight)
