"""Output files honour the umask as any other program's do (issue 30): metrics,
summary, config and checkpoint files are 0644 under umask 022 (mkstemp alone makes them
0600), and the atomic writes still replace the files whole."""
import os
import stat

import mpi_teleport as mt
from mpi_teleport.disk.output import current_umask, write_atomic
from mpi_teleport.problems.quadratic import Quadratic


def _modes(root):
    return {os.path.relpath(os.path.join(d, f), root): stat.S_IMODE(os.stat(os.path.join(d, f)).st_mode)
            for d, _, files in os.walk(root) for f in files if not f.endswith(".lock")}


def test_run_files_and_checkpoints_are_0644_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        assert current_umask() == 0o022
        mt.teleportation(Quadratic(n=4, d=3, seed=1), nodes=4, k=2, rounds=6, lr=0.05,
                         log_every=2, out=tmp_path / "run", checkpoint_every=3,
                         checkpoint_dir=tmp_path / "ckpt")
    finally:
        os.umask(old)
    modes = {**_modes(tmp_path / "run"), **{"ckpt/" + k: v for k, v in _modes(tmp_path / "ckpt").items()}}
    assert {"metrics.jsonl", "summary.json", "config.json"} <= set(modes)
    assert any(name.endswith("MANIFEST.json") for name in modes)
    assert any(name.endswith(".npy") or name.endswith(".npz") for name in modes)
    wrong = {name: oct(mode) for name, mode in modes.items() if mode != 0o644}
    assert not wrong


def test_a_stricter_umask_is_honoured_and_the_write_stays_atomic(tmp_path):
    path = tmp_path / "f.json"
    old = os.umask(0o077)
    try:
        write_atomic(path, "one")
        write_atomic(path, "two")
    finally:
        os.umask(old)
    assert path.read_text() == "two" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["f.json"]  # no temporary file left behind
